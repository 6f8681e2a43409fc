"""How a bundled instance is written down before it is built into SWE-bench JSON.

A repository is a clean codebase (``files``). An instance injects one bug into it (``bug``: exact
text replacements that turn good code into the base state), adds tests that expose the bug
(``tests``: text appended to existing test files, which becomes ``test_patch``), and carries a
plausible but wrong fix (``decoy``: replacements applied to the base, which the simulator's policy
plays when the model "fails"). The gold patch is the diff from the base back to the clean code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Edit = tuple[str, str, str]  # (path, old text, new text); old must occur exactly once


@dataclass(frozen=True)
class InstanceSpec:
    number: int
    created_at: str  # ISO 8601, UTC ("2024-03-01T10:00:00Z"); also the base commit's date
    problem_statement: str
    bug: list[Edit]
    decoy: list[Edit]
    tests: list[tuple[str, str]]  # (test file, text appended to it)
    hints_text: str = ""


@dataclass(frozen=True)
class RepoSpec:
    repo: str  # "wedgewatch/toylib"
    files: dict[str, str]
    instances: list[InstanceSpec] = field(default_factory=list)


COMMON_FILES = {
    ".gitignore": "__pycache__/\n*.pyc\n.pytest_cache/\n",
    "pyproject.toml": (
        "[project]\n"
        'name = "{name}"\n'
        'version = "0.1.0"\n'
        'requires-python = ">=3.9"\n'
        "\n"
        "[tool.pytest.ini_options]\n"
        'pythonpath = ["."]\n'
        'addopts = "-p no:cacheprovider -p no:asyncio"\n'
    ),
}
