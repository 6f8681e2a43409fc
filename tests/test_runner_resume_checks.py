"""Resume's refusals and marks that need no server: a changed config, a run still alive, a run id
already taken, orphaned server lives and attempts left in flight (real SQLite, real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ledger_helpers import add_attempt, make_run
from wedgewatch.config import Config
from wedgewatch.ledger import Ledger
from wedgewatch.runner import resume


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", *args], capture_output=True, text=True, timeout=60
    )


def test_resume_with_a_different_config_is_refused(tmp_path: Path) -> None:
    ledger = tmp_path / "l.sqlite"
    with Ledger(ledger) as lg:
        make_run(lg, "r", ["a"], cfg=Config())
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[run]\nconcurrency = 9\nledger = "{ledger}"\n')
    proc = _cli("run", str(cfg), "--resume", "r", "--ledger", str(ledger))
    assert proc.returncode == 2
    assert "differs from the run's snapshot at run.concurrency" in proc.stderr


def test_a_new_run_cannot_take_an_existing_id(tmp_path: Path) -> None:
    ledger = tmp_path / "l.sqlite"
    with Ledger(ledger) as lg:
        make_run(lg, "taken", ["a"])
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[suite]\nslice = "0:1"\n[run]\nledger = "{ledger}"\n')
    proc = _cli("run", str(cfg), "--run-id", "taken")
    assert proc.returncode == 2 and "already exists" in proc.stderr and "--resume taken" in proc.stderr


def test_resume_refuses_a_run_whose_process_is_alive(tmp_path: Path) -> None:
    ledger = tmp_path / "l.sqlite"
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "wedgewatch", "run"])
    try:
        with Ledger(ledger) as lg:
            make_run(lg, "r", ["a"])
            lg.append(
                "run_marks",
                {"run_id": "r", "ts": time.time(), "kind": "started", "detail_json": {"pid": alive.pid}},
            )
        proc = _cli("run", "--resume", "r", "--ledger", str(ledger))
        assert proc.returncode == 2 and f"still running (pid {alive.pid})" in proc.stderr
    finally:
        alive.kill()
        alive.wait()


def test_prepare_marks_in_flight_attempts_and_stops_orphaned_servers(tmp_path: Path) -> None:
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    argv = ["python", "-c", "import time; time.sleep(60)"]
    try:
        with Ledger(tmp_path / "l.sqlite") as lg:
            make_run(lg, "r", ["a", "b"])
            done = add_attempt(lg, "r", "a", 1, "submitted", patch="x")
            open_one = add_attempt(lg, "r", "b", 1, None)
            lg.append(
                "server_lives",
                {"life_id": "L1", "run_id": "r", "profile": "sim", "argv_json": argv, "base_url": "http://x",
                 "pid": orphan.pid, "start_reason": "run_start", "started_at": time.time()},
            )  # fmt: skip
            found = resume.prepare(lg, "r")
            ends = {
                r["attempt_id"]: (r["status"], r["reason"]) for r in lg.query("SELECT * FROM attempt_ends")
            }
            life_end = lg.query("SELECT end_reason FROM server_life_ends WHERE life_id = 'L1'")[0][0]
        assert found["interrupted_attempts"] == [open_one] and found["orphaned_lives"] == ["L1"]
        assert ends == {done: ("submitted", ""), open_one: ("interrupted", "found_on_resume")}
        assert life_end == "orphaned"
        assert orphan.wait(timeout=10) != 0  # killed
    finally:
        if orphan.poll() is None:
            os.kill(orphan.pid, 9)
            orphan.wait()
    assert json.dumps(found)  # the resumed mark's detail is JSON


def test_an_attempt_found_on_resume_ends_when_its_run_was_last_heard_from(tmp_path: Path) -> None:
    # Killed an hour ago, resumed now: the hour of downtime is not time the attempt spent (it was
    # counted as time lost to the infrastructure, larger than the run's own wall clock).
    t0 = time.time() - 3600
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["a"])
        lg.append(
            "server_lives",
            {"life_id": "L1", "run_id": "r", "profile": "sim", "base_url": "http://x",
             "start_reason": "run_start", "started_at": t0},
        )  # fmt: skip
        lg.append(
            "attempts",
            {"attempt_id": "r-a-1", "run_id": "r", "instance_id": "a", "attempt_no": 1, "started_at": t0 + 1,
             "life_id": "L1", "agent": "test", "age_seconds": 0, "age_requests": 0, "age_tokens": 0},
        )  # fmt: skip
        for ts in (t0 + 2, t0 + 40):  # the supervisor's scrapes, the last one just before the kill
            lg.append("metric_samples", {"ts": ts, "life_id": "L1", "name": "x", "value": 1.0})
        assert resume.mark_interrupted(lg, "r") == ["r-a-1"]
        [end] = lg.query("SELECT ended_at, detail_json FROM attempt_ends")
        [dur] = lg.query("SELECT duration FROM attempt_view WHERE attempt_id = 'r-a-1'")
    assert end["ended_at"] == pytest.approx(t0 + 40)
    assert dur["duration"] == pytest.approx(39.0)
    assert json.loads(end["detail_json"])["found_at"] >= t0 + 3600
