"""The retry budget the server cannot exhaust, on real runs against the simulator: attempts a
restart or a detected wedge ended are requeued (one attempt per instance is enough to finish
them all), ``--resume RUN --attempts N`` finishes a run's infra_failed instances and keeps every
earlier row, and a planned recycle drains the attempts in flight instead of killing them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger_helpers import dump, outcomes
from test_runner_sim import IDS, _cli, attempts_of, problem_line, write_config
from wedgewatch.config import load_config
from wedgewatch.ledger import Ledger
from wedgewatch.runner import entry as runner_main
from wedgewatch.runner.state import RunContext
from wedgewatch.testing import eventually_async

pytestmark = pytest.mark.timeout(180)


def _budget_rows(lg: Ledger, run_id: str) -> dict[str, tuple[int, int]]:
    rows = lg.query(
        "SELECT instance_id, n_infra, n_requeued FROM instance_outcomes WHERE run_id = ?", (run_id,)
    )
    return {r[0]: (r[1], r[2]) for r in rows}


def test_attempts_killed_by_restarts_keep_the_whole_budget(tmp_path: Path) -> None:
    """run.attempts = 1, and two restarts each end attempts in flight: under a budget the server
    could exhaust those instances would be infra_failed; here every one finishes."""
    # Deadlines and metrics window of 10 s real (200 s at 20x), not the scaled 1 s floor: on a
    # saturated machine a new life's first tokens came 1.9 s late, two stall_ttft api_errors used
    # the one attempt, and the instances were infra_failed by the machine, not by the restarts.
    cfg = load_config(write_config(tmp_path, ids=IDS[:3], concurrency=3, deadline=200.0, wedge_window=200.0))
    cfg.run.attempts = 1
    # on_wedge "fail": the subject is the budget of attempts a restart ends; with the default
    # resume a restart ends none (tests/test_runner_sim.py shows both).
    cfg.watchdog.on_wedge = "fail"
    killed: list[str] = []

    def on_context(ctx: RunContext) -> None:
        async def restart_twice() -> None:
            for need in (2, 1):  # the second restart meets the requeued attempts again
                await eventually_async(lambda n=need: len(ctx.inflight) >= n, timeout=120, what="attempts")
                killed.extend(ctx.inflight)
                await ctx.server.members[0].restart("test")  # type: ignore[attr-defined]

        ctx.loop.create_task(restart_twice())  # type: ignore[union-attr]

    ex = runner_main.start(cfg, run_id="restarts", on_context=on_context)
    assert ex.end_mark == "finished"
    with Ledger(cfg.run.ledger) as lg:
        att = attempts_of(lg, "restarts")
        got = outcomes(lg, "restarts")
        budget = _budget_rows(lg, "restarts")
    assert len(killed) >= 3
    ends = {a["attempt_id"]: a for rows in att.values() for a in rows}
    assert all((ends[k]["status"], ends[k]["reason"]) == ("api_error", "server_restarted") for k in killed)
    assert set(got.values()) == {"resolved"}, got
    hit = {ends[k]["instance_id"] for k in killed}
    for iid in hit:
        assert budget[iid][0] == 0 and budget[iid][1] >= 1  # requeued, none of the budget used
        assert att[iid][-1]["status"] == "submitted" and len(att[iid]) >= 2


def test_attempts_that_stalled_on_a_wedged_server_are_requeued(tmp_path: Path) -> None:
    """Every server life wedges at its 10th generation request (the simulator's wedge fault; the
    readiness canary and the warm-up count, and an instance takes 7): the second instance's
    first attempt meets it and stalls, the supervisor's canary finds the wedge and restarts. With
    one attempt per instance, both still finish. (The metrics window is long so that the stall,
    not the flat counters, comes first: a restart before the stall would leave the agent's thread
    running, and its late requests would count toward the next life's 10th.)"""
    faults = '[[fault]]\nwhen.nth = 10\naction = "wedge"\n'
    # total: the agent's request (one answer, not a stream) ends at total_timeout, 2 s at this
    # time scale, before the wedge window (3 s) finds the wedge.
    path = write_config(tmp_path, faults=faults, ids=IDS[:2], concurrency=1, wedge_window=60.0, total=40)
    cfg = load_config(path)
    cfg.run.attempts = 1
    ex = runner_main.start(cfg, run_id="wedged")
    assert ex.end_mark == "finished"
    with Ledger(cfg.run.ledger) as lg:
        att = attempts_of(lg, "wedged")
        got = outcomes(lg, "wedged")
        budget = _budget_rows(lg, "wedged")
        wedges = lg.query("SELECT life_id FROM events WHERE kind = 'wedge' AND run_id = 'wedged'")
    failed = [a for rows in att.values() for a in rows if a["status"] == "api_error"]
    assert wedges and failed, att
    assert {a["life_id"] for a in failed} <= {w[0] for w in wedges}
    assert set(got.values()) == {"resolved"}, got
    assert all(n_infra == 0 for n_infra, _ in budget.values())
    assert sum(n for _, n in budget.values()) == len(failed)


@pytest.mark.long
def test_resume_with_more_attempts_finishes_the_infra_failed_and_keeps_every_row(tmp_path: Path) -> None:
    # The second instance's prompt stalls twice per server life; the canary answers, so the
    # server is not wedged: those are budgeted failures, and with one attempt it is infra_failed.
    # (The metrics window is long: a stalled request alone on the server has the flat counters
    # of a wedge, and a 1 s window raced the proxy's 1 s first-token deadline, once restarting.)
    faults = f'[[fault]]\nwhen.contains = "{problem_line(1)}"\ntimes = 2\naction = "stall_ttft"\n'
    path = write_config(
        tmp_path,
        faults=faults,
        ids=IDS[:2],
        server="restart_after_api_errors = 0",
        wedge_window=60.0,
        total=40,
    )
    path.write_text(path.read_text().replace("attempts = 3", "attempts = 1"))
    ledger = str(load_config(path).run.ledger)
    first = _cli("run", str(path), "--run-id", "more", "--json")
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads(first.stdout)["outcomes"]["infra_failed"] == 1
    assert _cli("run", str(path), "--attempts", "5").returncode == 2  # only with --resume
    with Ledger(ledger) as lg:
        before = dump(lg)
        assert outcomes(lg, "more")[IDS[1]] == "infra_failed"
    again = _cli("run", "--resume", "more", "--ledger", ledger, "--attempts", "5", "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads(again.stdout)
    assert summary["outcomes"]["infra_failed"] == 0 and summary["attempts_max"] == 5
    with Ledger(ledger) as lg:
        after = dump(lg)
        got = outcomes(lg, "more")
        att = attempts_of(lg, "more")
        change = lg.query("SELECT field, value_json, previous_json FROM run_changes WHERE run_id = 'more'")
        marks = [(m["kind"], json.loads(m["detail_json"])) for m in lg.query("SELECT * FROM run_marks")]
    for table, rows in before.items():
        assert after[table][: len(rows)] == rows, table  # nothing rewritten, only appended
    assert [tuple(c) for c in change] == [("run.attempts", "5", "1")]
    assert got[IDS[1]] == "resolved"
    # The new life's fault stalls twice more: attempts 2 and 3 fail, 4 submits.
    assert [a["status"] for a in att[IDS[1]]] == ["api_error", "api_error", "api_error", "submitted"]
    # Only the infra_failed instance was re-run: the other kept its single attempt.
    assert len(att[IDS[0]]) == 1
    resumed = [d for k, d in marks if k == "resumed"]
    assert resumed and resumed[-1]["changed"] == [{"field": "run.attempts", "from": 1, "to": 5}]


def test_a_planned_recycle_drains_the_attempts_in_flight(tmp_path: Path) -> None:
    cfg = load_config(
        write_config(
            tmp_path,
            ids=IDS[:3],
            concurrency=2,
            server="recycle_every_instances = 2",
            deadline=200.0,  # as above: the recycles are under test, not a starved stream's stall
            wedge_window=200.0,
        )
    )
    ex = runner_main.start(cfg, run_id="drain")
    assert ex.end_mark == "finished"
    with Ledger(cfg.run.ledger) as lg:
        att = attempts_of(lg, "drain")
        got = outcomes(lg, "drain")
        lives = lg.query("SELECT end_reason FROM server_life_view WHERE run_id = 'drain' ORDER BY started_at")
        events: list[tuple[str, dict[str, Any]]] = [
            (e["kind"], json.loads(e["detail_json"]))
            for e in lg.query("SELECT * FROM events WHERE kind IN ('drain', 'drained') ORDER BY id")
        ]
    # The first recycle comes after two instances, with the third in flight. (The second comes
    # as the run ends, and the run's own stop may take that life first.)
    assert lives[0][0] == "recycle_instances" and len(lives) >= 2
    assert set(got.values()) == {"resolved"}
    # No attempt was killed by a recycle: every instance has its one, submitted, attempt.
    ends = {iid: [(a["status"], a["reason"]) for a in rows] for iid, rows in att.items()}
    assert all(e == [("submitted", "")] for e in ends.values()), ends
    assert events and events[0][0] == "drain" and events[1][0] == "drained"  # there was work to wait for
    assert events[1][1]["left"] == 0 and events[1][1]["reason"] == "recycle_instances"
