"""The README and docs/ against the code: every ``wedgewatch`` command line in their code blocks
names a command and flags it has, and every ``from wedgewatch... import ...`` in them imports.
(A reader found a doc's import line and a constructor's keywords gone stale; this keeps both
from drifting again.)"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.main

from wedgewatch.cli import _load_commands
from wedgewatch.cli._app import app

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"`(?:\$ )?wedgewatch ([^`]+)`")
# Inline spans that are names, not command lines: the git identities of sandbox commits.
_NOT_COMMANDS = {"agent", "suite <suite@wedgewatch.invalid>"}
_IMPORT = re.compile(r"^\s*from (wedgewatch[\w.]*) import \(?([\w, ]+)\)?", re.MULTILINE)


def _blocks(path: Path) -> list[str]:
    return _FENCE.findall(path.read_text())


def _command_lines(block: str) -> list[str]:
    """Shell lines that run wedgewatch (a ``$`` prompt and continuations joined), up to a ``|``,
    ``;``, ``&&`` or comment."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.strip().removeprefix("$ ").strip()
        for prefix in ("wedgewatch ", ".venv/bin/wedgewatch "):
            if line.startswith(prefix):
                out.append(re.split(r"\s(?:\||;|&&|#)\s", line[len(prefix) :])[0])
    return out


def _resolve(group: Any, words: list[str]) -> tuple[Any, list[str]]:
    """The (sub)command the words name and the words after it (typer's vendored click commands:
    a group has ``commands``)."""
    cmd = group
    while hasattr(cmd, "commands") and words and not words[0].startswith("-"):
        sub = cmd.commands.get(words[0])
        if sub is None:
            break
        cmd, words = sub, words[1:]
    return cmd, words


def _cases() -> list[tuple[str, str]]:
    """Command lines in code blocks, and inline ones in the prose (`wedgewatch run --resume RUN`)."""
    fenced = [(p.name, line) for p in DOCS for b in _blocks(p) for line in _command_lines(b)]
    inline = [
        (p.name, m)
        for p in DOCS
        for m in _INLINE.findall(_FENCE.sub("", p.read_text()))
        if m not in _NOT_COMMANDS
    ]
    return sorted(set(fenced + inline))


@pytest.fixture(scope="module")
def root() -> Any:
    _load_commands([])  # every command module registers its commands
    return typer.main.get_command(app)


def test_the_docs_show_commands_at_all() -> None:
    # The parsing below must find the docs' command lines, or the next test checks nothing.
    assert len(_cases()) > 50 and {"README.md", "proxy.md", "runner.md"} <= {d for d, _ in _cases()}


@pytest.mark.parametrize(("doc", "line"), _cases())
def test_every_command_line_in_the_docs_names_a_command_and_its_flags(root: Any, doc: str, line: str) -> None:
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    cmd, rest = _resolve(root, words)
    assert cmd is not root, f"{doc}: `wedgewatch {line}`: no such command"
    if hasattr(cmd, "commands"):
        assert not rest or rest[0].startswith("-"), f"{doc}: `wedgewatch {line}`: no such subcommand"
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    for word in rest:
        if word == "--":
            break  # what follows is another program's command line (wrap)
        flag = word.lstrip("[").split("=", 1)[0].rstrip("]|")  # `[--json]`, `--out=DIR`
        if flag.startswith("--") and flag != "--" and "..." not in flag:
            assert flag in known, f"{doc}: `wedgewatch {line}`: {cmd.name} has no {flag}"


def test_every_import_in_the_docs_imports() -> None:
    seen = 0
    for path in DOCS:
        for block in _blocks(path):
            for module, names in _IMPORT.findall(block):
                mod = importlib.import_module(module)
                for name in (n.strip() for n in names.split(",") if n.strip()):
                    assert hasattr(mod, name) or importlib.util.find_spec(f"{module}.{name}"), (
                        f"{path.name}: from {module} import {name}: no such name"
                    )
                    seen += 1
    assert seen >= 10
