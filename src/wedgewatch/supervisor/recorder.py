"""The supervisor's ledger writer: one subscriber to the bus that turns each typed supervisor event
into its row (``server_lives``, ``server_life_ready``, ``server_life_ends`` or ``events``).

Each fact is published once, as an event (base/events.py), and this is its only writer: the row is
read from the same value every other subscriber reads, so the row and the event can never disagree
(the proxy's ``Ending`` is the same idea). The metric samples are no events and are written here
directly. Nothing here raises into the publisher: a ledger that fails logs and loses the row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from wedgewatch.base.events import (
    ApiErrors,
    CanaryAnswered,
    CanarySkipped,
    Crashed,
    Drained,
    DrainStarted,
    Event,
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
    Wedged,
)
from wedgewatch.base.processes import Identity
from wedgewatch.base.vocab import EVENT_KINDS
from wedgewatch.ledger import Ledger
from wedgewatch.wire.heartbeat import Reading

log = logging.getLogger(__name__)


class Recorder:
    """Writes one supervisor's facts to the ledger (when there is one)."""

    def __init__(self, ledger: Ledger | None, run_id: str | None, member: str | None = None) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.member = member  # the pool member's name: a pool's members share the bus

    def attach(self, bus: EventBus) -> Callable[[], None]:
        """Record every event of this member published on ``bus``; returns the unsubscribe."""
        return bus.subscribe(self.record)

    def record(self, ev: Event) -> None:
        """The row of one event, if it is this member's and has one."""
        if not isinstance(ev, SupervisorEvent) or ev.member != self.member:
            return
        table, row = _row(ev, self.run_id)
        if table:
            self._append(table, row)

    def samples(self, life_id: str, r: Reading, names: dict[str, float | None]) -> None:
        rows = [
            {"ts": r.wall, "life_id": life_id, "name": n, "value": v}
            for n, v in names.items()
            if v is not None
        ]
        if self.ledger is None or not rows:
            return
        try:
            self.ledger.append_many("metric_samples", rows)
        except Exception:
            log.exception("could not record metric samples")

    def _append(self, table: str, row: dict[str, Any]) -> None:
        if self.ledger is None:
            return
        try:
            self.ledger.append(table, row)
        except Exception:
            log.exception("could not record %s row", table)


def _row(ev: SupervisorEvent, run_id: str | None) -> tuple[str, dict[str, Any]]:
    """``(table, row)`` for one event; ``("", {})`` for an event that is no row."""
    match ev:
        case ServerStarting():
            # Who runs the server, and who must end it: the next process to open the ledger
            # stops the server of a life whose owner was killed, once it has checked by start
            # time that the pid still names that server (stack/recovery.py).
            server = Identity.of(ev.pid).columns() if ev.pid is not None else {}
            return "server_lives", {
                **server,
                **Identity.me().columns("owner_"),
                "life_id": ev.life_id,
                "run_id": run_id,
                "profile": ev.profile,
                "argv_json": ev.argv,
                "flags_json": ev.flags,
                "base_url": ev.base_url,
                "pid": ev.pid,
                "start_reason": ev.reason,
                "started_at": ev.ts,
                "log_path": ev.log_path,
                "member": ev.member,
            }
        case ServerReady():
            return "server_life_ready", {
                "life_id": ev.life_id,
                "ready_at": ev.ts,
                "ready_seconds": ev.ready_seconds,
                "warmup_json": ev.warmup,
            }
        case LifeEnded():
            return "server_life_ends", {
                "life_id": ev.life_id,
                "ended_at": ev.ts,
                "end_reason": ev.reason,
                "exit_code": ev.exit_code,
                "age_seconds": ev.age_seconds,
                "age_requests": ev.age_requests,
                "age_tokens": ev.age_tokens,
            }
    if ev.kind not in EVENT_KINDS:
        return "", {}
    detail = _detail(ev)
    life_id = ev.life_id if isinstance(ev, ServerEvent) else None  # GaveUp, StandbyRoom: the run's row
    return "events", {
        "ts": ev.ts,
        "kind": ev.kind,
        "run_id": run_id,
        "life_id": life_id,
        "detail_json": detail,
    }


def _detail(ev: SupervisorEvent) -> dict[str, Any]:
    """An ``events`` row's detail, keys in the order they have always been written."""
    match ev:
        case Wedged():
            return dict(ev.evidence)
        case Crashed():
            return {"life_id": ev.life_id, "exit_code": ev.exit_code, "log_tail": ev.log_tail}
        case Restarting():
            return {"reason": ev.reason, "life_id": ev.life_id}
        case RestartSkipped():
            return {"reason": ev.reason, "why": ev.why}
        case GaveUp():
            # The run's row, not a life's: the life whose restart failed had ended already.
            return {"reason": ev.reason, "error": ev.error}
        case StartFailed():  # and WarmupFailed, whose kind says which
            return {"error": ev.error, "warmup": ev.warmup}
        case ApiErrors():
            return {"consecutive": ev.consecutive}
        case DrainStarted():
            return {"reason": ev.reason, "in_flight": ev.in_flight, "timeout": ev.timeout}
        case Drained():
            return {"reason": ev.reason, "left": ev.left, "waited": ev.waited}
        case CanaryAnswered():
            return {**ev.result, "trigger": ev.trigger}
        case CanarySkipped():
            return {"skipped": ev.why, "trigger": ev.trigger, **ev.load}
        case Promoted():
            return {
                "replaced": ev.replaced,
                "reason": ev.reason,
                "idle": ev.idle,
                "woke": ev.woke,
                "planned": ev.planned,
            }
        case StandbyRoom():
            return {"on": ev.on, "line": ev.line, **ev.figures}
    raise TypeError(f"{type(ev).__name__} is of kind {ev.kind}, an events row, and has no detail here")
