"""``wedgewatch bench standby`` for real on the simulator, one trial of the spare's arm: a wedge
mid-run loses no task, the struck requests go on on the promoted spare (their wait from the verdict
is measured), and each trial is said on stderr as it ends; a bad ``--arm`` is one line, exit 2.
How long the wait is on the real vLLM is the bench's to measure (docs/benchmarks.md), never a test's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

BENCH = [sys.executable, "-m", "wedgewatch", "bench", "standby"]


@pytest.mark.long
def test_a_wedge_loses_no_task_with_a_spare_and_its_struck_requests_go_on_there() -> None:
    argv = [*BENCH, "--trials", "1", "--arm", "one+spare", "--tasks", "6", "--concurrency", "2"]
    done = subprocess.run([*argv, "--tokens", "24", "--json"], capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert list(out["summary"]) == ["one+spare"]
    (run,) = out["runs"]
    assert run["lost"] == 0 and run["errors"] == []
    assert run["struck"] >= 1 and len(run["wait"]) == run["struck"]
    assert run["serving"] is not None  # a promotion followed the verdict
    assert "trial 1/1 one+spare: " in done.stderr


def test_a_bad_bench_standby_arm_is_one_line() -> None:
    done = subprocess.run([*BENCH, "--arm", "two"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--arm: no 'two'" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
