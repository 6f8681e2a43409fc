"""The runner end to end: the simulator (a real subprocess, supervised), the proxy, the bash agent,
real sandboxes and real pytest evaluations on the bundled suite.

The simulator's swe policy decides per (instance, seed, skill) whether the model solves an
instance, so outcomes are known in advance: with seed 2 and skill 0.5 the first five bundled
instances are solve, wander (step limit), wrong patch, solve, wander.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ledger_helpers import dump, outcomes
from wedgewatch.analysis.summary import summarise
from wedgewatch.config import load_config
from wedgewatch.ledger import Ledger, checks
from wedgewatch.runner import entry as runner_main
from wedgewatch.runner.state import RunContext
from wedgewatch.suites import load_bundled
from wedgewatch.testing import eventually, eventually_async

pytestmark = pytest.mark.timeout(240)

IDS = [i["instance_id"] for i in load_bundled()[:6]]
SEED2 = {  # behaviour of the first five bundled instances at seed 2, skill 0.5
    IDS[0]: "resolved",
    IDS[1]: "early_stop",
    IDS[2]: "unresolved",
    IDS[3]: "resolved",
    IDS[4]: "early_stop",
}


def problem_line(n: int) -> str:
    return str(load_bundled()[n]["problem_statement"]).splitlines()[0]


def write_config(
    tmp_path: Path,
    *,
    faults: str = "",
    skill: float = 1.0,
    ids: list[str] | None = None,
    seed: int = 0,
    concurrency: int = 2,
    server: str = "",
    name: str = "c",
    wedge_window: float = 5.0,
    deadline: float = 20.0,
    total: float = 240.0,
) -> Path:
    scenario = tmp_path / f"{name}-scenario.toml"
    scenario.write_text(f"[policy]\nskill = {skill}\n{faults}")
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(
        f"""
[server]
profile = "sim"
scenario = "{scenario}"
args = ["--policy", "swe"]
scrape_interval = 0.2
wedge_window = {wedge_window}
log_dir = "{tmp_path / "logs"}"
{server}
[server.warmup]
count = 1
[watchdog]
ttft_timeout = {deadline}
stall_timeout = {deadline}
total_timeout = {total}
[agent]
step_limit = 8
[suite]
ids = {json.dumps(ids or IDS[:4])}
[run]
concurrency = {concurrency}
attempts = 3
ledger = "{tmp_path / f"{name}.sqlite"}"
workdir = "{tmp_path / "work"}"
time_scale = 20.0
seed = {seed}
"""
    )
    return cfg


def attempts_of(lg: Ledger, run_id: str) -> dict[str, list[sqlite3.Row]]:
    out: dict[str, list[sqlite3.Row]] = {}
    for r in lg.query("SELECT * FROM attempt_view WHERE run_id = ? ORDER BY attempt_no", (run_id,)):
        out.setdefault(r["instance_id"], []).append(r)
    return out


def test_a_stall_ends_the_attempt_api_error_and_the_retry_runs_in_a_new_directory(tmp_path: Path) -> None:
    faults = f"""
[[fault]]
when.contains = "{problem_line(0)}"
times = 1
action = "stall_ttft"
[[fault]]
when.contains = "{problem_line(1)}"
action = "stall_ttft"
"""
    # The agent asks for one answer, not a stream: a stalled one ends at total_timeout (2 s at this
    # time scale), before the wedge window (3 s) would call the lone stuck request a wedge.
    path = write_config(
        tmp_path, faults=faults, ids=IDS[:3], server="restart_after_api_errors = 0", wedge_window=60, total=40
    )
    cfg = load_config(path)
    ex = runner_main.start(cfg, run_id="stall")
    assert ex.end_mark == "finished"
    with Ledger(cfg.run.ledger) as lg:
        att = attempts_of(lg, "stall")
        got = outcomes(lg, "stall")
        s = summarise(lg, "stall")
        stall_rows = lg.query(
            "SELECT attempt_id, outcome FROM requests WHERE outcome != 'ok' AND attempt_id IS NOT NULL"
        )
    first = att[IDS[0]]
    assert [(a["status"], a["reason"]) for a in first] == [("api_error", "total_timeout"), ("submitted", "")]
    assert first[0]["sandbox_path"] != first[1]["sandbox_path"]
    assert Path(first[0]["sandbox_path"]).parent != Path(first[1]["sandbox_path"]).parent
    assert got[IDS[0]] == "resolved"
    # stalls every time: all three attempts api_error, counted infra_failed, not a model failure
    assert [a["reason"] for a in att[IDS[1]]] == ["total_timeout"] * 3
    assert got[IDS[1]] == "infra_failed"
    assert got[IDS[2]] == "resolved"
    assert {(r["attempt_id"], r["outcome"]) for r in stall_rows} >= {
        (first[0]["attempt_id"], "total_timeout")
    }
    assert s["outcomes"]["infra_failed"] == 1 and s["outcomes"]["resolved"] == 2
    assert (s["resolved_rate_all"]["k"], s["resolved_rate_all"]["n"]) == (2, 3)
    assert (s["resolved_rate_model"]["k"], s["resolved_rate_model"]["n"]) == (2, 2)
    assert s["stalls"]["total_timeout"] == 4


def test_model_side_outcomes_are_final(tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path, skill=0.5, seed=2, ids=IDS[:5], concurrency=3))
    runner_main.start(cfg, run_id="model")
    with Ledger(cfg.run.ledger) as lg:
        att = attempts_of(lg, "model")
        got = outcomes(lg, "model")
        reasons = {r["instance_id"]: r["final_reason"] for r in lg.query("SELECT * FROM instance_outcomes")}
    assert got == SEED2
    assert all(len(a) == 1 for a in att.values()), {k: len(v) for k, v in att.items()}
    assert reasons[IDS[1]] == "step_limit"


@pytest.mark.parametrize("on_wedge", ["fail", "resume"])
def test_a_server_restart_ends_attempts_in_flight_and_requeues_them(tmp_path: Path, on_wedge: str) -> None:
    """With ``on_wedge = "fail"`` a restart ends the attempts in flight on it (api_error,
    server_restarted) and requeues them; with ``"resume"`` (the default) their requests go on on
    the next life and the attempts with them: the restart costs no attempt."""
    cfg = load_config(write_config(tmp_path, ids=IDS[:4], concurrency=3))
    cfg = cfg.model_copy(update={"watchdog": cfg.watchdog.model_copy(update={"on_wedge": on_wedge})})
    seen: dict[str, Any] = {}

    def on_context(ctx: RunContext) -> None:
        async def restart_when_busy() -> None:
            await eventually_async(lambda: len(ctx.inflight) >= 2, timeout=120, what="two attempts")
            seen["in_flight"] = sorted(ctx.inflight)
            seen["old_life"] = ctx.server.life_id
            await ctx.server.members[0].restart("test")  # type: ignore[attr-defined]

        seen["task"] = asyncio.get_running_loop().create_task(restart_when_busy())

    runner_main.start(cfg, run_id="restart", on_context=on_context)
    with Ledger(cfg.run.ledger) as lg:
        ends = {r["attempt_id"]: r for r in lg.query("SELECT * FROM attempt_view WHERE run_id = 'restart'")}
        att = attempts_of(lg, "restart")
        got = outcomes(lg, "restart")
        lives = lg.query("SELECT * FROM server_life_view WHERE run_id = 'restart' ORDER BY started_at")
        s = summarise(lg, "restart")
        assert checks.problems(lg) == []  # the same checks as a wrapped run's ledger (test_wrap.py)
    assert len(seen["in_flight"]) >= 2
    assert set(got.values()) == {"resolved"}
    assert len(lives) == 2 and lives[0]["end_reason"] == "test" and lives[1]["start_reason"] == "test"
    assert s["server"]["restarts"] == 1
    if on_wedge == "resume":
        for aid in seen["in_flight"]:
            assert (ends[aid]["status"], ends[aid]["attempt_no"]) == ("submitted", 1)  # it went on
        return
    for aid in seen["in_flight"]:
        assert (ends[aid]["status"], ends[aid]["reason"]) == ("api_error", "server_restarted")
        assert ends[aid]["life_id"] == seen["old_life"]
        iid = ends[aid]["instance_id"]
        later = [a for a in att[iid] if a["attempt_no"] > ends[aid]["attempt_no"]]
        assert later and later[-1]["status"] == "submitted"  # re-queued, in a fresh sandbox
        assert later[-1]["life_id"] != seen["old_life"]


def _kill_orphans(ledger_path: Path) -> None:
    """Servers a SIGKILLed runner left behind (resume stops them too; this is the test's own net)."""
    with Ledger(ledger_path) as lg:
        pids = [r[0] for r in lg.query("SELECT pid FROM server_lives WHERE pid IS NOT NULL")]
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.long
@pytest.mark.parametrize("when", ["first_attempt", "mid_run"])
def test_sigkill_then_resume_gives_the_uninterrupted_outcomes_and_keeps_every_row(
    tmp_path: Path, when: str
) -> None:
    import random

    cfg_path = write_config(tmp_path, skill=0.5, seed=2, ids=IDS[:5], concurrency=2)
    ledger_path = tmp_path / "c.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wedgewatch", "run", str(cfg_path), "--run-id", "k", "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    rng = random.Random()
    # The kill lands at a random moment of the run: that is the test. Mid-run is counted in
    # attempts, not seconds (the third or fourth has started, so one has ended and one is still
    # to come): a fixed 1-4 s outlived the whole run on an idle machine.
    started = 1 if when == "first_attempt" else rng.choice((3, 4))
    delay = rng.uniform(0.0, 0.5)
    try:
        eventually(
            lambda: proc.poll() is not None or _attempts(ledger_path) >= started, 60, what="an attempt"
        )
        time.sleep(delay)  # the subject: a kill at a random moment of the attempt
        assert proc.poll() is None, "the run ended before the kill; the test needs a longer suite"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        with Ledger(ledger_path) as lg:
            before = dump(lg)
            in_flight = lg.query(
                "SELECT a.attempt_id FROM attempts a LEFT JOIN attempt_ends e USING (attempt_id) "
                "WHERE e.attempt_id IS NULL"
            )
        resumed = _cli("run", "--resume", "k", "--ledger", str(ledger_path), "--json")
        assert resumed.returncode == 0, resumed.stderr
        summary = json.loads(resumed.stdout)
        assert summary["state"] == "finished"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _kill_orphans(ledger_path)
    with Ledger(ledger_path) as lg:
        after = dump(lg)
        got = outcomes(lg, "k")
        finals = lg.query(
            "SELECT a.instance_id, COUNT(*) FROM attempts a JOIN attempt_ends e USING (attempt_id) "
            "WHERE e.status IN ('submitted', 'early_stop') GROUP BY a.instance_id"
        )
        interrupted = {
            r[0] for r in lg.query("SELECT attempt_id FROM attempt_ends WHERE status = 'interrupted'")
        }
        marks = [r["kind"] for r in lg.query("SELECT kind FROM run_marks WHERE run_id = 'k' ORDER BY id")]
    at = f"killed {delay:.2f}s after attempt {started} started"
    assert got == SEED2, at
    for table, rows in before.items():
        missing = set(rows) - set(after[table])
        assert not missing, f"{table}: rows lost after resume ({at}): {missing}"
    assert all(n == 1 for _, n in finals)  # no duplicated final outcome
    assert {r[0] for r in in_flight} <= interrupted
    assert marks[0] == "started" and marks[-2:] == ["resumed", "finished"]


@pytest.mark.long
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_marks_attempts_interrupted_and_stops_the_server(tmp_path: Path, sig: signal.Signals) -> None:
    cfg_path = write_config(tmp_path, ids=IDS[:3], concurrency=2)
    ledger_path = tmp_path / "c.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wedgewatch", "run", str(cfg_path), "--run-id", "c", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(lambda: _attempts(ledger_path) >= 1, 60, what="an attempt")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "--resume c" in err
    with Ledger(ledger_path) as lg:
        marks = [r["kind"] for r in lg.query("SELECT kind FROM run_marks ORDER BY id")]
        open_attempts = lg.query(
            "SELECT COUNT(*) FROM attempts a LEFT JOIN attempt_ends e USING (attempt_id) WHERE e.attempt_id IS NULL"
        )[0][0]
        lives = lg.query("SELECT end_reason, pid FROM server_life_view")
        stopped = lg.query(
            "SELECT COUNT(*) FROM attempt_ends WHERE status = 'interrupted' AND reason = 'run_stopped'"
        )
    assert marks == ["started", "interrupted"]
    assert open_attempts == 0 and stopped[0][0] >= 1
    assert all(life["end_reason"] is not None for life in lives)  # no server left running
    resumed = _cli("run", "--resume", "c", "--ledger", str(ledger_path), "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["outcomes"]["resolved"] == 3
    with Ledger(ledger_path) as lg:
        n_lives = lg.query("SELECT COUNT(*) FROM server_lives")[0][0]
    again = _cli("run", "--resume", "c", "--ledger", str(ledger_path), "--json")  # nothing left to do
    assert again.returncode == 0 and json.loads(again.stdout)["state"] == "finished"
    with Ledger(ledger_path) as lg:
        assert lg.query("SELECT COUNT(*) FROM server_lives")[0][0] == n_lives  # no server started


def _attempts(ledger_path: Path) -> int:
    if not ledger_path.exists():
        return 0
    with Ledger(ledger_path) as lg:
        return int(lg.query("SELECT COUNT(*) FROM attempts")[0][0])


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_run_leaves_no_agent_command_running(tmp_path: Path, sig: signal.Signals) -> None:
    marker = f"wedgewatch-orphan-check-{uuid.uuid4().hex}"  # unique across parallel workers
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f"""
[server]
log_dir = "{tmp_path / "logs"}"
[agent]
name = "command"
command = ["bash", "-c", "python3 -c 'import time; time.sleep(300)' {marker} & wait", "{marker}"]
[suite]
ids = {json.dumps(IDS[:2])}
[run]
concurrency = 2
ledger = "{tmp_path / "c.sqlite"}"
workdir = "{tmp_path / "work"}"
time_scale = 20.0
"""
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "wedgewatch", "run", str(cfg)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Each attempt: its bash and the grandchild it left in the background (a forking bash may
        # briefly show twice).
        eventually(lambda: len(_processes_with(marker)) >= 4, 60, what="both agent commands running")
        # No pause needed: a command's group is listed before the command can run (groups.spawn).
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        # The runner is gone; so must be the commands it started (they would sleep 300 s more).
        eventually(lambda: _processes_with(marker) == [], 5, what="no agent command left running")
    finally:
        if proc.poll() is None:  # a failed check: let the runner stop its server, then insist
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for pid in _processes_with(marker):
            os.kill(pid, signal.SIGKILL)
