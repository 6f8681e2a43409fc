"""The house's shape, checked from the code's own imports with import-linter (the contracts live in
pyproject.toml): no import cycle at any depth, type-checking imports included, and none of the
arrows the design forbids. Each contract is also shown to fail on a tree that breaks it."""

from __future__ import annotations

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
            "wedgewatch/proxy/context.py",
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
    ],
)
def test_a_broken_contract_fails_the_check(tmp_path: Path, file: str, line: str, contract: str) -> None:
    shutil.copytree(ROOT / "src" / "wedgewatch", tmp_path / "wedgewatch")
    target = tmp_path / file
    target.write_text(target.read_text() + "\n" + line)
    res = _lint(tmp_path)
    assert res.returncode != 0
    broken = [ln for ln in res.stdout.splitlines() if ln.endswith("BROKEN")]
    assert any(ln.startswith(contract) for ln in broken), res.stdout[-3000:]


def test_no_module_is_over_400_lines_outside_bundled_data() -> None:
    src = ROOT / "src" / "wedgewatch"
    big = {
        str(p.relative_to(src)): n
        for p in src.rglob("*.py")
        if "suites/authoring" not in p.as_posix() and (n := len(p.read_text().splitlines())) > 400
    }
    assert big == {}
