"""The house's shape, checked from the code's own imports with import-linter (the contracts live in
pyproject.toml): no import cycle at any depth, type-checking imports included, and none of the
arrows the design forbids. Each contract is also shown to fail on a tree that breaks it."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LINT, "--config", ROOT / "pyproject.toml", "--no-cache"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
    )


def test_the_tree_keeps_every_contract() -> None:
    res = _lint(ROOT / "src")
    assert res.returncode == 0, res.stdout[-3000:]
    assert "broken" in res.stdout and "0 broken" in res.stdout


@pytest.mark.parametrize(
    ("file", "line", "contract"),
    [
        # A cycle hidden under TYPE_CHECKING is still a cycle.
        (
            "wedgewatch/proxy/shared.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from wedgewatch.proxy.exchange import Exchange\n",
            "no import cycle",
        ),
        (
            "wedgewatch/analysis/summary.py",
            "from wedgewatch.runner import retry\n",
            "analysis reads the record",
        ),
        (
            "wedgewatch/proxy/app.py",
            "def _f():\n    import wedgewatch.supervisor\n",
            "the proxy sees an Upstream",
        ),
        ("wedgewatch/ledger/queries.py", "import wedgewatch.runner.resume\n", "the ledger knows no writer"),
        # The ground imports no part above it, even inside a function.
        ("wedgewatch/base/vocab.py", "def _f():\n    import wedgewatch.ledger\n", "layers"),
        ("wedgewatch/wire/sse.py", "import wedgewatch.config\n", "layers"),
        # Parts on one line of the layers are independent of each other.
        ("wedgewatch/agents/echo.py", "import wedgewatch.supervisor.policy\n", "layers"),
        # A loose module at the package's top belongs to no layer.
        ("wedgewatch/loose.py", "X = 1\n", "layers"),
    ],
)
def test_a_broken_contract_fails_the_check(tmp_path: Path, file: str, line: str, contract: str) -> None:
    shutil.copytree(ROOT / "src" / "wedgewatch", tmp_path / "wedgewatch")
    target = tmp_path / file
    target.write_text((target.read_text() if target.exists() else "") + "\n" + line)
    res = _lint(tmp_path)
    assert res.returncode != 0
    broken = [ln for ln in res.stdout.splitlines() if ln.endswith("BROKEN")]
    assert any(ln.startswith(contract) for ln in broken), res.stdout[-3000:]


def _long_and_silent(root: Path) -> list[str]:
    """Modules over 400 lines whose docstring's first paragraph does not say why ("long because")."""
    silent = []
    for p in root.rglob("*.py"):
        text = p.read_text()
        if "suites/authoring" in p.as_posix() or len(text.splitlines()) <= 400:
            continue
        first = (ast.get_docstring(ast.parse(text)) or "").split("\n\n")[0]
        if "long because" not in " ".join(first.split()).lower():
            silent.append(str(p.relative_to(root)))
    return silent


def test_a_module_over_400_lines_says_why_in_its_docstring(tmp_path: Path) -> None:
    assert _long_and_silent(ROOT / "src" / "wedgewatch") == []
    # The rule can fail: a long module that does not say why is named.
    (tmp_path / "big.py").write_text('"""A module."""\n' + "x = 1\n" * 401)
    (tmp_path / "said.py").write_text(
        '"""A module, long because its one idea is.\n\nMore."""\n' + "x = 1\n" * 401
    )
    assert _long_and_silent(tmp_path) == ["big.py"]


def test_nothing_but_init_and_main_at_the_package_top() -> None:
    top = sorted(p.name for p in (ROOT / "src" / "wedgewatch").glob("*.py"))
    assert top == ["__init__.py", "__main__.py"]
