"""The attempt budget the server cannot exhaust, as the ledger views decide it (real SQLite, rows
written by hand): attempts a restart ended, or that failed on a life found wedged, are requeued
and counted against run.max_requeues, not run.attempts; a raised budget is a change row that
turns infra_failed back into pending and rewrites nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import RunningServer
from ledger_helpers import add_attempt, dump, make_run, next_actions, outcomes
from wedgewatch.base.errors import BadInput
from wedgewatch.base.vocab import SERVER_RESTARTED as REQUEUED
from wedgewatch.config import Config, ServerConfig, WarmupConfig, validate
from wedgewatch.ledger import Ledger, queries
from wedgewatch.runner import resume
from wedgewatch.supervisor import Supervisor
from wedgewatch.supervisor.drain import POLL, drain, retire
from wedgewatch.testing import ManualClock, settle


def _row(lg: Ledger, run_id: str, iid: str) -> dict[str, object]:
    rows = lg.query("SELECT * FROM instance_outcomes WHERE run_id = ? AND instance_id = ?", (run_id, iid))
    return dict(rows[0])


def test_attempts_a_restart_ended_are_requeued_not_counted(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["a", "b"], attempts_max=2)
        for no in (1, 2, 3):  # three restarts in a row end a's attempts: more than attempts_max
            add_attempt(lg, "r", "a", no, "api_error", reason=REQUEUED)
        add_attempt(lg, "r", "b", 1, "api_error", reason="stall_ttft")
        add_attempt(lg, "r", "b", 2, "api_error", reason="stall_ttft")
        assert outcomes(lg, "r") == {"a": "pending", "b": "infra_failed"}
        assert next_actions(lg, "r")["a"] == ("attempt", 4)
        row = _row(lg, "r", "a")
        assert (row["n_infra"], row["n_requeued"], row["n_api_error"]) == (0, 3, 3)
        add_attempt(lg, "r", "a", 4, "submitted", patch="diff\n", resolved=1)
        assert outcomes(lg, "r")["a"] == "resolved"


def test_a_failure_on_a_life_found_wedged_is_requeued(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["a", "b"], attempts_max=1)
        add_attempt(lg, "r", "a", 1, "api_error", reason="stall_ttft", life_id="wedged-life")
        add_attempt(lg, "r", "b", 1, "api_error", reason="stall_ttft", life_id="healthy-life")
        assert outcomes(lg, "r") == {"a": "infra_failed", "b": "infra_failed"}
        lg.event("wedge", {"source": "canary"}, run_id="r", life_id="wedged-life")
        assert outcomes(lg, "r") == {"a": "pending", "b": "infra_failed"}
        # A harness error says nothing about the server: it stays budgeted, wedge or not.
        add_attempt(lg, "r", "a", 2, "harness_error", reason="sandbox", life_id="wedged-life")
        assert outcomes(lg, "r")["a"] == "infra_failed"


def test_max_requeues_caps_a_server_that_keeps_dying(tmp_path: Path) -> None:
    cfg = validate({"run": {"max_requeues": 2}}, "t")
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["a"], attempts_max=3, cfg=cfg)
        add_attempt(lg, "r", "a", 1, "api_error", reason=REQUEUED)
        assert outcomes(lg, "r") == {"a": "pending"}
        add_attempt(lg, "r", "a", 2, "api_error", reason=REQUEUED)
        assert outcomes(lg, "r") == {"a": "infra_failed"}
        assert queries.budgets(lg, "r")["max_requeues"] == 2
    # A ledger written before max_requeues existed: its snapshot has no such field.
    snap = Config().snapshot()
    del snap["run"]["max_requeues"]
    with Ledger(tmp_path / "old.sqlite") as lg:
        lg.append(
            "runs",
            {"run_id": "old", "started_at": 0.0, "config_json": snap, "config_hash": "x",
             "tool_version": "0", "suite": "t", "attempts_max": 3, "seed": 0},
        )  # fmt: skip
        assert queries.budgets(lg, "old")["max_requeues"] == Config().run.max_requeues


def test_raising_the_budget_is_a_change_row_and_rewrites_nothing(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["a", "b"], attempts_max=2)
        for no in (1, 2):
            add_attempt(lg, "r", "a", no, "api_error", reason="stall_ttft")
        add_attempt(lg, "r", "b", 1, "submitted", patch="diff\n", resolved=0)
        assert outcomes(lg, "r") == {"a": "infra_failed", "b": "unresolved"}
        before = dump(lg)
        with pytest.raises(BadInput, match="--attempts: 1 is below the run's 2"):
            resume.raise_attempts(lg, "r", 1)
        assert resume.raise_attempts(lg, "r", 2) is None  # no change, no row
        assert resume.raise_attempts(lg, "r", 5) == {"field": "run.attempts", "from": 2, "to": 5}
        after = dump(lg)
        assert outcomes(lg, "r") == {"a": "pending", "b": "unresolved"}
        assert next_actions(lg, "r")["a"] == ("attempt", 3)
        assert queries.budgets(lg, "r")["attempts_max"] == 5
        # Every earlier row is still there as it was; the one new row is the change.
        for table, rows in before.items():
            assert after[table][: len(rows)] == rows, table
        assert len(after["run_changes"]) == 1 and len(before["run_changes"]) == 0
        assert lg.query("SELECT attempts_max FROM runs WHERE run_id = 'r'")[0][0] == 2
        for no in (3, 4, 5):
            add_attempt(lg, "r", "a", no, "api_error", reason="stall_ttft")
        assert outcomes(lg, "r")["a"] == "infra_failed"  # the new budget runs out like the old


def _drain_events(lg: Ledger) -> list[tuple[str, dict[str, object]]]:
    rows = lg.query("SELECT kind, detail_json FROM events WHERE kind IN ('drain', 'drained') ORDER BY id")
    return [(r[0], json.loads(r[1])) for r in rows]


async def test_a_drain_waits_for_work_up_to_its_deadline_and_stops_at_a_wedge(
    tmp_path: Path, start_sim: Callable[..., RunningServer]
) -> None:
    # The real supervisor on a manual clock, watching a simulator it did not start: the drain's
    # 30 s deadline and its looks at the work in flight are the clock's, and cost no real second.
    server, clock = start_sim(), ManualClock()
    cfg = ServerConfig(
        profile="external",
        url=server.url,
        recycle_drain_timeout=30.0,
        warmup=WarmupConfig(count=0),
        log_dir=str(tmp_path / "logs"),
    )
    with Ledger(tmp_path / "l.sqlite") as lg:
        sup = Supervisor(cfg, ledger=lg, run_id="r", clock=clock)
        await sup.start()
        try:
            busy = [2]
            sup.busy = lambda: busy[0]  # as the runner sets it: its attempts in flight
            life = sup.current
            assert life is not None
            draining = asyncio.ensure_future(drain(life, "recycle_instances", sup))
            await settle()  # the drain has begun: its clock starts now
            await clock.advance(29.9)  # the work never finishes: only the deadline ends the drain
            assert not draining.done() and life.draining
            await clock.advance(0.1 + 2 * POLL)  # its last look may fall a hair short of 30 s
            await asyncio.wait_for(draining, 10)
            assert [k for k, _ in _drain_events(lg)] == ["drain", "drained"]
            drained = _drain_events(lg)[1][1]
            assert drained["left"] == 2 and 30.0 <= float(str(drained["waited"])) <= 30.0 + 2 * POLL

            draining = asyncio.ensure_future(drain(life, "recycle_tokens", sup))
            await settle()
            await clock.advance(0.2)
            busy[0] = 1  # one attempt finished, one is left
            await clock.advance(0.2)
            assert not draining.done()
            life.wedged = True  # the wedge's own path takes the life down: stop waiting
            await clock.advance(POLL)
            await asyncio.wait_for(draining, 10)
            drained = _drain_events(lg)[-1][1]
            assert drained["left"] == 1 and float(str(drained["waited"])) < 1.0  # not the deadline
            busy[0] = 0
            n = len(_drain_events(lg))
            await drain(life, "recycle_tokens", sup)  # nothing in flight: no drain at all
            assert len(_drain_events(lg)) == n
        finally:
            await sup.stop()


def test_max_requeues_zero_is_a_harness_without_wedgewatch(tmp_path: Path) -> None:
    cfg = validate({"run": {"max_requeues": 0}}, "t")
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["a"], attempts_max=2, cfg=cfg)
        add_attempt(lg, "r", "a", 1, "api_error", reason=REQUEUED)
        assert outcomes(lg, "r") == {"a": "pending"}
        add_attempt(lg, "r", "a", 2, "api_error", reason=REQUEUED)
        assert outcomes(lg, "r") == {"a": "infra_failed"}  # both used the budget
        assert (_row(lg, "r", "a")["n_infra"], _row(lg, "r", "a")["n_requeued"]) == (2, 0)


async def test_a_retired_life_ends_once_the_proxy_holds_nothing_on_it_or_at_the_deadline(
    tmp_path: Path, start_sim: Callable[..., RunningServer]
) -> None:
    # What a spare's handover waits for on the life it replaced (drain.retire), on a manual clock:
    # requests the proxy holds there, not attempts, and a scrape taken after the handover.
    server, clock = start_sim(), ManualClock()
    cfg = ServerConfig(
        profile="external",
        url=server.url,
        recycle_drain_timeout=30.0,
        warmup=WarmupConfig(count=0),
        log_dir=str(tmp_path / "logs"),
    )
    held = [1]
    with Ledger(tmp_path / "l.sqlite") as lg:
        sup = Supervisor(cfg, ledger=lg, run_id="r", clock=clock)
        await sup.start()
        try:
            life = sup.current
            assert life is not None
            retiring = asyncio.ensure_future(retire(life, "recycle_instances", sup, lambda _: (held[0], 0)))
            await settle()
            await clock.advance(29.9)  # a request held there never ends: only the deadline does
            assert not retiring.done()
            await clock.advance(0.1 + 2 * POLL)
            await asyncio.wait_for(retiring, 10)
            drained = _drain_events(lg)[-1][1]
            assert drained["left"] == 1 and 30.0 <= float(str(drained["waited"])) <= 30.0 + 2 * POLL

            held[0] = 0  # nothing held: done at the first scrape taken after it began
            retiring = asyncio.ensure_future(retire(life, "recycle_instances", sup, lambda _: (held[0], 0)))
            await settle()
            assert not retiring.done(), "the last scrape was taken before: not yet known idle"

            async def until_retired() -> None:
                # The scrape is real HTTP: the clock moves on in small steps while it is answered.
                while not retiring.done():
                    await clock.advance(POLL)
                    await asyncio.wait({retiring}, timeout=0.05)

            await asyncio.wait_for(until_retired(), 30)
            drained = _drain_events(lg)[-1][1]
            assert drained["left"] == 0 and float(str(drained["waited"])) < 30.0  # not the deadline
        finally:
            await sup.stop()
