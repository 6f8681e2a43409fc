"""The suite's `xdist_group` marks must hold: `make test` runs `--dist loadgroup`, and the tests
that share a costly module fixture (the default demo, a Ray cluster, a llama.cpp server) rely on
their group to make it once. pytest 9.2 with xdist 3.8 ignored every mark without a word
(pytest-dev/pytest-xdist#1386); the lock pins pytest below 9.2 until xdist follows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GROUPED = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("one")

@pytest.mark.parametrize("i", range(6))
def test_where(i):
    with open(os.environ["WHERE"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    where = tmp_path / "where.txt"
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "WHERE": str(where)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-2000:]
    workers = where.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers
