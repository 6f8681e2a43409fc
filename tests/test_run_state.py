"""The state `report` gives a run of several runners: one runner's stop is not the run's while
another holds a live lease (judged by the ledger's clock, as the runners judge each other)."""

from __future__ import annotations

import time
from pathlib import Path

from ledger_helpers import make_run
from wedgewatch.analysis.summary import summarise
from wedgewatch.ledger import Ledger


def _runner(lg: Ledger, runner_id: str, lease: float | None) -> None:
    row = {"runner_id": runner_id, "run_id": "r", "role": "start", "host": "h", "pid": 1}
    lg.append("runners", {**row, "started_at": time.time(), "lease_seconds": lease, "tool_version": "t"})


def _mark(lg: Ledger, kind: str) -> None:
    lg.append("run_marks", {"run_id": "r", "ts": time.time(), "kind": kind})


def test_a_run_is_running_while_a_runner_holds_its_lease_after_another_stopped(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["a", "b"])
        _runner(lg, "A", 5.0)
        _runner(lg, "B", 5.0)
        _runner(lg, "old", None)  # a runner of a one-writer ledger, never ended: no lease, not counted
        lg.append("runner_beats", {"runner_id": "A"})
        lg.append("runner_beats", {"runner_id": "B", "ts": lg.now() - 60})  # B's lease ran out
        _mark(lg, "started")
        _mark(lg, "joined")
        assert summarise(lg, "r")["state"] == "joined"

        lg.append("runner_ends", {"runner_id": "A", "ended_at": time.time(), "how": "interrupted"})
        _mark(lg, "interrupted")
        s = summarise(lg, "r")
        assert (s["state"], s["runners_alive"]) == ("interrupted", 0)  # B is silent: nobody works on

        lg.append("runner_beats", {"runner_id": "B"})  # B beats again, within its lease
        s = summarise(lg, "r")
        assert (s["state"], s["runners_alive"]) == ("running", 1)

        lg.append("runner_ends", {"runner_id": "B", "ended_at": time.time(), "how": "finished"})
        _mark(lg, "finished")
        s = summarise(lg, "r")
        assert (s["state"], s["runners_alive"]) == ("finished", 0)
