"""Harnesses nobody here wrote, under ``wedgewatch wrap``, against a simulator that wedges once in
the middle of their run (a scenario fault with a ``marker``: it strikes once across server lives,
mid-stream, with requests of several tasks in flight): no task is failed by the wedge, and
``audit`` of the harness's results lists no instance to rerun. Issue 35 measured 8 of 16 tasks of
the OpenAI Agents SDK failed by one wedge before requests in flight were resumed.

- The OpenAI Agents SDK (``tests/agents_harness.py``, its default client and retries), 16 tasks 8
  at a time, each a tool call and an answer: chat completions and the Responses API, streamed and
  not. A begun stream is continued (chat's text) or replayed up to what the client has (a tool
  call's arguments, the Responses API); a request the client has nothing of is sent again whole.
- mini-swe-agent's batch mode (``mini-extra swebench``, 4 workers, its retries turned down to one
  try so a failed request would cost its instance), the simulator's ``swe`` policy playing the
  model: the instance whose request the wedge struck ends as it does on a server that never
  wedged.

Real subprocesses throughout (wrap, the simulator's lives, the harnesses, audit); the ledger is
read for what happened: one wedge, one restart, requests resumed, none failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from test_wrap_miniswe import IDS, run_wrapped, struck_by_instance
from test_wrap_miniswe import setup as mini_setup
from wedgewatch.base import vocab
from wedgewatch.ledger import Ledger, queries

HARNESS = Path(__file__).with_name("agents_harness.py")
TASKS = 16


def _config(tmp_path: Path, nth: int, action: str = "wedge") -> Path:
    # The nth generation request of a server process wedges it a few tokens in (or kills its
    # engine: every request in flight gets the engine's error, new ones 500, and the process exits
    # two seconds later): the readiness canary is the first (no warm-up), so on the first life it
    # is one of the harness's, mid-run, with the other tasks' requests in flight; the marker keeps
    # the next life from wedging.
    death = "exit_code = 0\nexit_delay = 40.0\n" if action == "engine_death" else ""
    (tmp_path / "wedge.toml").write_text(
        f'[[fault]]\nwhen.nth = {nth}\naction = "{action}"\nafter_tokens = 3\n{death}'
        f'marker = "{tmp_path / "struck"}"\n'
    )
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f"""
[server]
scenario = "{tmp_path / "wedge.toml"}"
time_scale = 20
log_dir = "{tmp_path / "logs"}"
scrape_interval = 0.2
heartbeat_window = 1.0
canary_timeout = 1.0
restart_backoff = 0.1

[server.warmup]
count = 0

[run]
ledger = "{tmp_path / "ledger.sqlite"}"
"""
    )
    return cfg


def _wedgewatch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", *args], capture_output=True, text=True, timeout=timeout
    )


def _one_wedge_nothing_failed(ledger: Path, ends: tuple[str, ...] = (vocab.WEDGE,)) -> list[dict[str, Any]]:
    """The run's requests, once the ledger shows one wedge (or a life that ended as one of
    ``ends``) and one restart, requests resumed across it and none failed on the infrastructure."""
    with Ledger(ledger, read_only=True) as lg:
        ((run_id,),) = lg.query("SELECT harness_run_id FROM harness_runs")
        rows = [dict(r) for r in queries.harness_requests(lg, run_id)]
        lives = [dict(r) for r in queries.server_lives(lg, run_id)]
    assert [lv["end_reason"] for lv in lives][1:] == [vocab.STOP], "one fault, one restart"
    assert lives[0]["end_reason"] in ends, lives
    resumed = [r for r in rows if r["outcome"] == vocab.RESUMED]
    assert resumed, "the wedge struck requests in flight"
    assert {r["life_id"] for r in resumed} == {lives[0]["life_id"]}
    failed = [
        (r["attempt_id"], r["outcome"], r["detail_json"])
        for r in rows
        if vocab.is_infra_outcome(r["outcome"])
    ]
    assert failed == []
    return rows


def _audit_reruns_nothing(tmp_path: Path, *results: str, suite: Path | None = None) -> dict[str, Any]:
    rerun = tmp_path / "rerun.txt"
    argv = [
        "audit",
        *results,
        "--ledger",
        str(tmp_path / "ledger.sqlite"),
        "--json",
        "--rerun-out",
        str(rerun),
    ]
    argv += ["--suite", str(suite)] if suite is not None else []
    done = _wedgewatch(*argv, timeout=60)
    assert done.returncode == 0, done.stderr
    audit: dict[str, Any] = json.loads(done.stdout)
    assert audit[vocab.INFRA_FAILED] == [] and rerun.read_text() == "", "nothing to rerun"
    return audit


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("mode", ["stream", "once"])
def test_the_openai_agents_sdk_under_wrap_loses_no_task_to_a_wedge(
    tmp_path: Path, api: str, mode: str
) -> None:
    results = tmp_path / "results.jsonl"
    harness = [sys.executable, str(HARNESS), api, mode, str(TASKS), str(results)]
    done = _wedgewatch("wrap", str(_config(tmp_path, nth=12)), "--", *harness, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    failed = [r for r in rows if r["outcome"] != "resolved"]
    assert len(rows) == TASKS and failed == [], failed
    requests = _one_wedge_nothing_failed(tmp_path / "ledger.sqlite")
    # Each task: a tool call and an answer, two requests that ended ok, whatever was resumed.
    ok = [r["attempt_id"] for r in requests if r["outcome"] == vocab.OK]
    assert sorted(ok) == sorted(f"task-{i:02d}" for i in range(TASKS) for _ in range(2))
    audit = _audit_reruns_nothing(tmp_path, str(results))
    assert audit["honest"] == audit["published"] and audit["honest"]["k"] == TASKS


def test_the_openai_agents_sdk_under_wrap_loses_no_task_to_an_engine_death(tmp_path: Path) -> None:
    """vLLM's EngineDeadError mid-run (sim/death.py): every stream in flight gets the engine's
    error event, requests sent meanwhile get HTTP 500, then the process exits. The harness at its
    SDK defaults loses no task, and ``audit`` lists none to rerun."""
    results = tmp_path / "results.jsonl"
    harness = [sys.executable, str(HARNESS), "chat", "stream", str(TASKS), str(results)]
    done = _wedgewatch(
        "wrap", str(_config(tmp_path, nth=12, action="engine_death")), "--", *harness, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    failed = [r for r in rows if r["outcome"] != "resolved"]
    assert len(rows) == TASKS and failed == [], failed
    # The canary the proxy asked for finds the engine dead (a wedge), or the exit is seen first.
    requests = _one_wedge_nothing_failed(tmp_path / "ledger.sqlite", ends=(vocab.WEDGE, vocab.CRASH))
    resumed = [json.loads(r["detail_json"]) for r in requests if r["outcome"] == vocab.RESUMED]
    assert {d["blame"] for d in resumed} == {vocab.ENGINE_DEATH}, resumed
    audit = _audit_reruns_nothing(tmp_path, str(results))
    assert audit["honest"] == audit["published"] and audit["honest"]["k"] == TASKS


@pytest.mark.long
def test_mini_swe_agent_batch_under_wrap_loses_no_instance_to_a_wedge(tmp_path: Path) -> None:
    """The suite and command of tests/test_wrap_miniswe.py, with its default ``on_wedge`` (resume):
    the instance the wedge struck is neither failed nor on the rerun list, and every instance's
    exit status is the one a run without the wedge gives."""
    healthy = tmp_path / "healthy"
    healthy.mkdir()
    run_wrapped(healthy, mini_setup(healthy, wedge=False), "out")
    cfg = mini_setup(tmp_path, wedge=True)
    # Resume (the default), and the heartbeat's verdict (1 s) before the proxy's own stall (2 s):
    # a stall is resumed only once the supervisor has judged its life, so one request stuck
    # while the server serves others stays its own failure (docs/proxy.md).
    # The wedge strikes once across lives (its marker), not once on each life.
    once = (tmp_path / "wedge.toml", "times = 1\n", f'marker = "{tmp_path / "struck"}"\n')
    for path, old, new in (
        (cfg, 'on_wedge = "fail"\n', ""),
        (cfg, "wedge_window = 2.0", "heartbeat_window = 1.0"),
        once,
    ):
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))
    run_wrapped(tmp_path, cfg, "out")
    truth = struck_by_instance(tmp_path)
    assert sum(truth.values()) >= 1, "the wedge struck a request of the harness"
    _one_wedge_nothing_failed(tmp_path / "ledger.sqlite")
    audit = _audit_reruns_nothing(tmp_path, str(tmp_path / "out"), suite=tmp_path / "suite")

    def exits(out: Path) -> dict[str, str]:
        preds = {p.name: p for p in out.iterdir() if p.is_dir()}
        return {
            iid: json.loads((preds[iid] / f"{iid}.traj.json").read_text())["info"]["exit_status"]
            for iid in IDS
        }

    assert exits(tmp_path / "out") == exits(healthy / "out")
    assert {i["instance_id"] for i in audit["instances"]} == set(IDS)
    assert os.path.getsize(tmp_path / "rerun.txt") == 0
