"""`wedgewatch bench scale` end to end, small: a run on a pool of two simulators and an idle pool."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", "bench", "scale", *args],
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.long
@pytest.mark.timeout(300)
def test_a_pool_run_and_an_idle_pool_are_measured() -> None:
    r = _bench(
        "--servers", "2", "--instances", "8", "--concurrency", "4", "--idle", "2", "--idle-seconds", "2"
    )
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    (run,) = doc["runs"]
    assert run["end"] == "finished" and run["statuses"] == {"submitted": 8}
    assert set(run["attempts_by_member"]) == {"s0", "s1"}  # the pool spread the attempts
    assert run["instances_per_min"] > 0 and run["overhead_ms_mean"] > 0
    (idle,) = doc["idle"]
    assert idle["members"] == 2 and idle["sample_rows_per_s"] > 0 and idle["driver_cpu_per_s"] > 0


def test_bad_flags_are_one_line_and_exit_2() -> None:
    for args in (["--servers", "0"], ["--executor", "nope"], ["--ledger", "mysql://x"], ["--idle", "a"]):
        r = _bench(*args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
