"""The attempt budget the server cannot exhaust, as the ledger views decide it (real SQLite, rows
written by hand): attempts a restart ended, or that failed on a life found wedged, are requeued
and counted against run.max_requeues, not run.attempts; a raised budget is a change row that
turns infra_failed back into pending and rewrites nothing."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from ledger_helpers import add_attempt, dump, make_run, next_actions, outcomes
from wedgewatch.base.clock import SYSTEM
from wedgewatch.base.errors import BadInput
from wedgewatch.base.events import EventBus
from wedgewatch.base.vocab import SERVER_RESTARTED as REQUEUED
from wedgewatch.config import Config, ServerConfig, validate
from wedgewatch.ledger import Ledger, queries
from wedgewatch.runner import resume
from wedgewatch.supervisor.detector import WedgeDetector
from wedgewatch.supervisor.drain import drain
from wedgewatch.supervisor.life import Life
from wedgewatch.supervisor.recorder import Recorder


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


class _Sup:
    """The few things a drain reads of the supervisor (drain.Draining), with a real Recorder."""

    def __init__(self, lg: Ledger, timeout: float, busy: list[int]) -> None:
        self.cfg = ServerConfig(recycle_drain_timeout=timeout)
        self.bus = EventBus()
        Recorder(lg, "r").attach(self.bus)
        self.busy = lambda: busy[0]
        self.clock = SYSTEM
        self.stopping = False
        self.current: Life | None = None


def _a_life() -> Life:
    return Life("life-x", None, [], "run_start", time.monotonic(), WedgeDetector(5.0))  # type: ignore[arg-type]


def _drain_events(lg: Ledger) -> list[tuple[str, dict[str, object]]]:
    rows = lg.query("SELECT kind, detail_json FROM events WHERE kind IN ('drain', 'drained') ORDER BY id")
    return [(r[0], json.loads(r[1])) for r in rows]


async def test_a_drain_waits_for_work_up_to_its_deadline_and_stops_at_a_wedge(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as lg:
        busy = [2]
        sup = _Sup(lg, 0.3, busy)
        life = sup.current = _a_life()
        t0 = time.monotonic()
        await drain(life, "recycle_instances", sup)  # work never finishes: the deadline ends it
        assert 0.3 <= time.monotonic() - t0 < 2.0 and life.draining
        assert [k for k, _ in _drain_events(lg)] == ["drain", "drained"]
        assert _drain_events(lg)[1][1]["left"] == 2

        sup.cfg = ServerConfig(recycle_drain_timeout=30.0)
        life = sup.current = _a_life()

        async def finish_then_wedge() -> None:
            await asyncio.sleep(0.2)
            busy[0] = 1  # one attempt finished, one is left
            await asyncio.sleep(0.2)
            life.wedged = True  # the wedge's own path takes the life down: stop waiting

        t0 = time.monotonic()
        await asyncio.gather(drain(life, "recycle_tokens", sup), finish_then_wedge())
        assert time.monotonic() - t0 < 5.0
        assert _drain_events(lg)[-1][1]["left"] == 1
        busy[0] = 0
        n = len(_drain_events(lg))
        await drain(_a_life(), "recycle_tokens", sup)  # nothing in flight: no drain at all
        assert len(_drain_events(lg)) == n


def test_max_requeues_zero_is_a_harness_without_wedgewatch(tmp_path: Path) -> None:
    cfg = validate({"run": {"max_requeues": 0}}, "t")
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["a"], attempts_max=2, cfg=cfg)
        add_attempt(lg, "r", "a", 1, "api_error", reason=REQUEUED)
        assert outcomes(lg, "r") == {"a": "pending"}
        add_attempt(lg, "r", "a", 2, "api_error", reason=REQUEUED)
        assert outcomes(lg, "r") == {"a": "infra_failed"}  # both used the budget
        assert (_row(lg, "r", "a")["n_infra"], _row(lg, "r", "a")["n_requeued"]) == (2, 0)
