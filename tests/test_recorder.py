"""The supervisor's one ledger writer (supervisor/recorder.py), on a real SQLite ledger: every
supervisor event becomes its row once, read from the event itself; a pool's members share one bus
and each member's recorder writes only its own; an event type without a row cannot be added
unnoticed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wedgewatch.base import events, vocab
from wedgewatch.base.events import (
    ApiErrors,
    CanaryAnswered,
    CanarySkipped,
    Crashed,
    Drained,
    DrainStarted,
    EventBus,
    GaveUp,
    LifeEnded,
    Promoted,
    Restarting,
    RestartSkipped,
    ServerEvent,
    ServerReady,
    ServerStarting,
    StandbyRoom,
    StartFailed,
    SupervisorEvent,
    WarmupFailed,
    Wedged,
)
from wedgewatch.ledger import Ledger
from wedgewatch.supervisor.recorder import Recorder


def _every_event(member: str | None, life: str) -> list[SupervisorEvent]:
    """One event of every supervisor type, as the supervisor publishes them."""
    at = {"member": member, "life_id": life}
    return [
        ServerStarting(
            **at, reason="run_start", profile="sim", argv=["sim", "--api-key", "***"], flags={"model": "m"},
            base_url="http://127.0.0.1:1", pid=42, log_path="/tmp/x.log",
        ),
        StartFailed(**at, error="exited", warmup=[]),
        WarmupFailed(**at, error="warm-up failed", warmup=[{"ok": False}]),
        ServerReady(**at, base_url="http://127.0.0.1:1", ready_seconds=1.25, warmup=[{"ok": True}]),
        CanaryAnswered(**at, result={"ok": True, "seconds": 0.1}, trigger={"event": "stall"}),
        CanarySkipped(**at, why="at concurrency limit", trigger={"event": "stall"}, load={"limit": 2}),
        Wedged(**at, evidence={"source": "canary", "life_id": life, "age_tokens": 7}),
        Crashed(**at, exit_code=3, log_tail="boom"),
        ApiErrors(**at, consecutive=3),
        DrainStarted(**at, reason="recycle_tokens", in_flight=2, timeout=30.0),
        Drained(**at, reason="recycle_tokens", left=0, waited=1.5),
        RestartSkipped(**at, reason="wedge", why="external server"),
        Restarting(**at, reason="wedge"),
        Promoted(**at, replaced="life-0", reason="wedge", idle=12.5, woke=None),
        LifeEnded(**at, reason="wedge", exit_code=-15, age_seconds=9.5, age_requests=4, age_tokens=7),
        GaveUp(member=member, reason="wedge", error="gave up after 3 restarts"),
        StandbyRoom(member=member, on=False, line="2 x 5.0 GB > 4.0 GB", figures={"need_gb": 10.0}),
    ]  # fmt: skip


def _subtypes(cls: type[SupervisorEvent]) -> set[type[SupervisorEvent]]:
    """Every subclass, as the module names it (``slots=True`` makes each class twice, and the
    first one, left behind, still shows among ``__subclasses__``)."""
    subs = {c for c in cls.__subclasses__() if getattr(events, c.__name__, None) is c}
    for sub in list(subs):
        subs |= _subtypes(sub)
    return subs


def _events(lg: Ledger) -> list[dict[str, Any]]:
    rows = lg.query("SELECT kind, run_id, life_id, detail_json FROM events ORDER BY id")
    return [{**dict(r), "detail_json": json.loads(r["detail_json"])} for r in rows]


def test_every_supervisor_event_is_one_row_read_from_the_event(tmp_path: Path) -> None:
    bus = EventBus()
    published = _every_event(None, "life-1")
    with Ledger(tmp_path / "l.sqlite") as lg:
        Recorder(lg, "run-1").attach(bus)
        for ev in published:
            bus.publish(ev)
        life = dict(lg.query("SELECT * FROM server_lives")[0])
        assert (life["start_reason"], life["pid"], life["member"], life["run_id"]) == (
            "run_start",
            42,
            None,
            "run-1",
        )
        assert json.loads(life["argv_json"]) == ["sim", "--api-key", "***"]
        assert life["started_at"] == published[0].ts
        ready = dict(lg.query("SELECT * FROM server_life_ready")[0])
        assert (ready["ready_seconds"], json.loads(ready["warmup_json"])) == (1.25, [{"ok": True}])
        end = dict(lg.query("SELECT * FROM server_life_ends")[0])
        assert (end["end_reason"], end["exit_code"], end["age_tokens"]) == ("wedge", -15, 7)
        rows = _events(lg)
    # Each events row under its event's kind, in the order published, none twice.
    assert [r["kind"] for r in rows] == [ev.kind for ev in published if ev.kind in vocab.EVENT_KINDS]
    by_kind = {r["kind"]: r for r in rows}
    assert by_kind[vocab.GAVE_UP]["life_id"] is None  # the run's row: its life had ended
    assert by_kind[vocab.CRASH]["detail_json"] == {"life_id": "life-1", "exit_code": 3, "log_tail": "boom"}
    assert by_kind[vocab.WEDGE]["detail_json"] == {"source": "canary", "life_id": "life-1", "age_tokens": 7}
    assert by_kind[vocab.RESTART]["detail_json"] == {"reason": "wedge", "life_id": "life-1"}
    assert by_kind[vocab.API_ERRORS]["detail_json"] == {"consecutive": 3}
    assert by_kind[vocab.PROMOTED]["detail_json"] == {
        "replaced": "life-0",
        "reason": "wedge",
        "idle": 12.5,
        "woke": None,
        "planned": False,
    }
    room = by_kind[vocab.STANDBY_ROOM]
    assert room["life_id"] is None and room["detail_json"]["need_gb"] == 10.0
    assert room["detail_json"]["on"] is False and "4.0 GB" in room["detail_json"]["line"]
    assert by_kind[vocab.WARMUP_FAILED]["detail_json"] == {
        "error": "warm-up failed",
        "warmup": [{"ok": False}],
    }
    skipped = [r["detail_json"] for r in rows if r["kind"] == vocab.CANARY][1]
    assert skipped == {"skipped": "at concurrency limit", "trigger": {"event": "stall"}, "limit": 2}


def test_every_supervisor_event_type_has_a_row() -> None:
    # A new event type must be given its row here (or a life table's): the list above covers all.
    assert {type(ev) for ev in _every_event(None, "l")} == _subtypes(SupervisorEvent) - {ServerEvent}


def test_a_pools_members_share_the_bus_and_each_writes_its_own(tmp_path: Path) -> None:
    bus = EventBus()
    with Ledger(tmp_path / "l.sqlite") as lg:
        for member in ("s0", "s1"):
            Recorder(lg, "run-1", member).attach(bus)
        for member, life in (("s0", "life-a"), ("s1", "life-b")):
            for ev in _every_event(member, life):
                bus.publish(ev)
        lives = lg.query("SELECT life_id, member FROM server_lives ORDER BY life_id")
        assert [tuple(r) for r in lives] == [("life-a", "s0"), ("life-b", "s1")]
        assert len(lg.query("SELECT * FROM server_life_ends")) == 2
        kinds = [r["kind"] for r in _events(lg)]
    assert len(kinds) == 2 * len([ev for ev in _every_event(None, "l") if ev.kind in vocab.EVENT_KINDS])


def test_without_a_ledger_every_event_is_heard_and_nothing_written() -> None:
    rec = Recorder(None, "run-1")
    for ev in _every_event(None, "life-1"):
        rec.record(ev)  # called directly: the bus would log an error, not raise it
