"""`wedgewatch run` with the real llama.cpp server and the real bundled Gemma 3 270M.

The model is real and weak: it fails the tasks for real, and every attempt must end on the
model's side (early_stop, or a submitted patch that does not resolve), never as api_error. A real
crash (SIGKILL of the server mid-request) must be seen, the server restarted, and the attempt it
hit retried in a fresh sandbox.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from wedgewatch.testing import eventually
from wedgewatch.wire import promtext

pytestmark = pytest.mark.long

MODEL_SIDE = {"early_stop", "submitted"}
MODEL_OUTCOMES = {"early_stop", "unresolved", "empty_patch", "resolved"}


def write_config(tmp_path: Path, agent: str, instances: str, concurrency: int, attempts: int) -> Path:
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f"""
[server]
profile = "llamacpp"
launcher = "xllamacpp"
model = "gemma3-270m"
args = ["--threads", "1", "--ctx-size", "8192", "--parallel", "{concurrency}"]
log_dir = "{tmp_path}/logs"
stop_grace = 2.0
restart_backoff = 0.5

# One short warm-up per life (test_real_supervisor checks the default two): at one thread the
# default's 2 x 40 tokens are about 3.5 s of the machine per life.
[server.warmup]
count = 1
max_tokens = 8

[watchdog]
ttft_timeout = 60.0
stall_timeout = 20.0

# Sixteen tokens are a real answer through the proxy; the model's first replies echo the prompt
# and hold no command at 48 tokens either, and each decoded token is about 70 ms of a core here.
[agent]
name = "{agent}"
step_limit = 2
max_tokens = 16

[suite]
slice = "{instances}"

[run]
concurrency = {concurrency}
attempts = {attempts}
ledger = "{tmp_path}/ledger.sqlite"
workdir = "{tmp_path}/work"
time_scale = 1.0
"""
    )
    return cfg


def start_run(cfg: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "wedgewatch", "run", str(cfg), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 150) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the run took over {timeout}s; stderr:\n{err[-3000:]}") from None
    assert proc.returncode == 0, err[-3000:]
    summary: dict[str, Any] = json.loads(out)
    return summary


def rows(ledger: Path, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    if not ledger.exists():
        return []
    con = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=10)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(sql, params)]
    except sqlite3.OperationalError:
        return []  # the schema is not there yet
    finally:
        con.close()


def assert_model_side(ledger: Path) -> list[dict[str, Any]]:
    attempts = rows(ledger, "SELECT * FROM attempt_view ORDER BY instance_id, attempt_no")
    assert attempts
    for a in attempts:
        assert a["status"] in MODEL_SIDE, (a["instance_id"], a["status"], a["reason"], a["detail_json"])
    outcomes = rows(ledger, "SELECT * FROM instance_outcomes")
    assert {o["outcome"] for o in outcomes} <= MODEL_OUTCOMES, outcomes
    assert not rows(ledger, "SELECT * FROM requests WHERE outcome != 'ok'")
    return attempts


def test_bash_agent_run_ends_on_the_models_side(tmp_path: Path) -> None:
    summary = finish(start_run(write_config(tmp_path, "bash", "0:2", concurrency=2, attempts=2)))
    attempts = assert_model_side(tmp_path / "ledger.sqlite")
    assert len(attempts) == 2  # model-side endings are final: nothing was retried
    assert summary["attempts"]["by_status"]["api_error"] == 0
    assert summary["server"]["lives"] == 1 and summary["server"]["restarts"] == 0
    # The model really answered: real tokens went through the proxy to the real server.
    assert all(a["tokens"] and a["tokens"] > 0 for a in attempts)


def test_mini_swe_agent_run_ends_on_the_models_side(tmp_path: Path) -> None:
    summary = finish(start_run(write_config(tmp_path, "mini-swe-agent", "2:3", concurrency=1, attempts=2)))
    attempts = assert_model_side(tmp_path / "ledger.sqlite")
    assert len(attempts) == 1
    assert summary["attempts"]["by_status"]["api_error"] == 0


def _processing(base_url: str) -> float:
    with urllib.request.urlopen(base_url + "/metrics", timeout=2) as resp:
        return promtext.parse(resp.read().decode()).total("llamacpp:requests_processing") or 0.0


def test_sigkill_mid_request_restarts_and_the_request_goes_on_on_the_next_life(tmp_path: Path) -> None:
    """The real llama.cpp server SIGKILLed under an attempt's request: the supervisor starts a new
    life and the proxy resumes the request there (``on_wedge = "resume"``, the default), so the
    attempt goes on and ends on the model's side, one attempt, no retry. (With ``"fail"`` the
    attempt would end api_error and be retried in a fresh sandbox: tests/test_runner_sim.py.)"""
    ledger = tmp_path / "ledger.sqlite"
    proc = start_run(write_config(tmp_path, "bash", "0:1", concurrency=1, attempts=2))
    killed: dict[str, Any] = {}

    def kill_under_a_request() -> bool:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        lives = rows(ledger, "SELECT l.* FROM server_lives l JOIN server_life_ready r USING (life_id)")
        started = rows(ledger, "SELECT * FROM attempts")
        if lives and started:
            try:
                busy = _processing(lives[0]["base_url"])
            except OSError:
                busy = 0
            if busy >= 1:  # the attempt's request is on the server: kill it under the request
                os.kill(int(lives[0]["pid"]), signal.SIGKILL)
                killed.update(lives[0])
        return bool(killed)

    try:
        eventually(kill_under_a_request, timeout=90, what="an attempt request on the server")
        finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    lives = rows(ledger, "SELECT * FROM server_life_view ORDER BY started_at")
    story = {
        "killed": killed.get("life_id"),
        "lives": [(lv["life_id"], lv["start_reason"], lv["end_reason"], lv["exit_code"]) for lv in lives],
        "attempts": [
            (a["attempt_no"], a["status"], a["reason"]) for a in rows(ledger, "SELECT * FROM attempt_view")
        ],
        "requests": [(r["outcome"], r["tokens_out"]) for r in rows(ledger, "SELECT * FROM requests")],
        "events": [e["kind"] for e in rows(ledger, "SELECT kind FROM events ORDER BY id")],
    }
    assert len(lives) == 2, story
    assert lives[0]["life_id"] == killed["life_id"]
    assert lives[0]["end_reason"] == "crash" and lives[0]["exit_code"] == -signal.SIGKILL, story
    assert lives[1]["start_reason"] == "crash" and lives[1]["ready_at"] is not None, story
    crash = rows(ledger, "SELECT * FROM events WHERE kind = 'crash'")
    assert len(crash) == 1 and crash[0]["life_id"] == killed["life_id"]

    attempts = rows(ledger, "SELECT * FROM attempt_view ORDER BY attempt_no")
    assert [a["attempt_no"] for a in attempts] == [1], story
    assert attempts[0]["status"] in MODEL_SIDE, story
    legs = rows(ledger, "SELECT * FROM requests ORDER BY started_at")
    cut = [q for q in legs if q["life_id"] == killed["life_id"] and q["outcome"] == "resumed"]
    assert len(cut) == 1, story  # the request under the kill, resumed
    after = [q for q in legs if json.loads(q["detail_json"]).get("resumes") == cut[0]["request_id"]]
    assert len(after) == 1 and after[0]["outcome"] == "ok" and after[0]["life_id"] == lives[1]["life_id"], (
        story
    )
    [outcome] = rows(ledger, "SELECT * FROM instance_outcomes")
    assert outcome["outcome"] in MODEL_OUTCOMES
