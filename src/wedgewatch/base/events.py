"""In-process events: how the proxy tells the supervisor (and the supervisor the runner) what
happened, without either importing the other.

One frozen dataclass per kind; subscribers match on the type (``isinstance`` or ``match``) and read
typed fields, never guessed dict keys. ``kind`` names each type in logs; ``detail`` gives the
fields as a dict for records and tests.

    Event
    ├── RequestEnded          the proxy finished a generation request (request_id, path, outcome, life_id)
    │   ├── RequestOk         ... with tokens (tokens_out, ttft, duration)
    │   ├── Stalled           ... aborted by a deadline (the stall's numbers)
    │   └── UpstreamFailed    ... the server answered 5xx or the connection failed
    ├── LifeInDoubt           a request failed as only a dying server fails it, and the server's
    │                         /health did not answer 200 (life_id, request_id, outcome, health)
    └── SupervisorEvent       from the supervisor of one server (member: its name in a pool)
        ├── GaveUp            the restart budget is spent: no more lives (reason, error)
        ├── StandbyRoom       at start: whether memory holds a spare engine (on, line, figures)
        └── ServerEvent       about one life (life_id)
            ├── ServerStarting    a life is being started: its ledger row's fields (reason,
            │                     profile, argv, flags, base_url, pid, log_path)
            ├── StartFailed       it did not come up (error, warmup)
            │   └── WarmupFailed  ... it came up, but a warm-up request failed
            ├── ServerReady       ready and warmed (base_url, ready_seconds, warmup)
            ├── CanaryAnswered    a one-token canary's result (result, trigger)
            ├── CanarySkipped     no canary: the server is full (why, trigger, load)
            ├── Wedged            no token progress with work in flight (evidence)
            ├── Crashed           the process exited (exit_code, log_tail)
            ├── ApiErrors         attempts failed on the API, too many in a row (consecutive)
            ├── DrainStarted      a planned recycle waits for the work in flight (reason,
            │                     in_flight, timeout)
            ├── Drained           ... and is done waiting (reason, left, waited)
            ├── RestartSkipped    a restart asked of a server nobody can restart (reason, why)
            ├── Restarting        a life is being replaced (reason); sent before its group dies
            ├── Promoted          a spare life serves now, in place of ``replaced`` (reason)
            └── LifeEnded         its process is gone (reason, exit_code, its age)

Every supervisor fact is one of these, published once: the ledger's rows of it (``server_lives``,
``server_life_ready``, ``server_life_ends``, ``events``) are written from the event by
``supervisor/recorder.py``, one subscriber among the others, so a row and its event can never
disagree. An event whose ``kind`` is an ``events`` row's kind is recorded under that kind.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from wedgewatch.base import vocab

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    kind: ClassVar[str] = "event"
    attempt_id: str | None = None
    ts: float = field(default_factory=time.time)

    @property
    def detail(self) -> dict[str, Any]:
        """The event's own fields as a dict: what happened, not to whom or when (``attempt_id``,
        ``member``, ``ts``)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("attempt_id", "member", "ts")
        }


# --- from the proxy -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestEnded(Event):
    request_id: str
    path: str
    outcome: str
    life_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestOk(RequestEnded):
    kind: ClassVar[str] = "request_ok"
    tokens_out: int = 0
    ttft: float | None = None
    duration: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Stalled(RequestEnded):
    kind: ClassVar[str] = "stall"
    elapsed: float = 0.0
    since_last_token: float = 0.0
    tokens_out: int = 0
    window: float = 0.0
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamFailed(RequestEnded):
    kind: ClassVar[str] = "upstream_error"
    status: int | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LifeInDoubt(Event):
    """A request on ``life_id`` failed as a dying server fails it (the engine's error event, a
    5xx, a cut connection) and the server's ``/health`` said so (``health``: what it answered):
    the proxy holds the request for the next life, and the supervisor's canary decides now rather
    than at its next scrape (docs/proxy.md, "Resume")."""

    kind: ClassVar[str] = "life_in_doubt"
    life_id: str
    request_id: str
    outcome: str
    health: str


# --- from the supervisor --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SupervisorEvent(Event):
    member: str | None
    """The server's name in a pool (``server.name``), None for the one ``[server]``: a pool's
    members share one bus, and each member's recorder writes only its own member's facts."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GaveUp(SupervisorEvent):
    kind: ClassVar[str] = vocab.GAVE_UP
    reason: str
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StandbyRoom(SupervisorEvent):
    """At start, with ``server.standby``: whether a spare engine fits beside the serving one
    (``on``), the line that says so with the arithmetic, and its figures (supervisor/room.py)."""

    kind: ClassVar[str] = vocab.STANDBY_ROOM
    on: bool
    line: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerEvent(SupervisorEvent):
    life_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerStarting(ServerEvent):
    kind: ClassVar[str] = "server_starting"
    reason: str
    profile: str
    argv: list[str]
    """Redacted (``redact.argv``): every subscriber may log it."""
    flags: dict[str, Any]
    base_url: str
    pid: int | None
    log_path: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class StartFailed(ServerEvent):
    kind: ClassVar[str] = vocab.START_FAILED
    error: str
    warmup: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmupFailed(StartFailed):
    kind: ClassVar[str] = vocab.WARMUP_FAILED


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerReady(ServerEvent):
    kind: ClassVar[str] = "server_ready"
    base_url: str
    ready_seconds: float
    warmup: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class CanaryAnswered(ServerEvent):
    kind: ClassVar[str] = vocab.CANARY
    result: dict[str, Any]
    """``probes.ProbeResult.as_dict()``: ok, seconds, ttft, status, error."""
    trigger: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class CanarySkipped(ServerEvent):
    kind: ClassVar[str] = vocab.CANARY
    why: str
    trigger: dict[str, Any]
    load: dict[str, Any]
    """``Life.load()``: the concurrency limit, and the requests running and waiting."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Wedged(ServerEvent):
    kind: ClassVar[str] = vocab.WEDGE
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Crashed(ServerEvent):
    kind: ClassVar[str] = vocab.CRASH
    exit_code: int | None = None
    log_tail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiErrors(ServerEvent):
    kind: ClassVar[str] = vocab.API_ERRORS
    consecutive: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DrainStarted(ServerEvent):
    kind: ClassVar[str] = vocab.DRAIN
    reason: str
    in_flight: int
    timeout: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Drained(ServerEvent):
    kind: ClassVar[str] = vocab.DRAINED
    reason: str
    left: int
    waited: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RestartSkipped(ServerEvent):
    kind: ClassVar[str] = vocab.RESTART_SKIPPED
    reason: str
    why: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Restarting(ServerEvent):
    kind: ClassVar[str] = vocab.RESTART
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Promoted(ServerEvent):
    """A spare life (``server.standby``, its ``life_id``) serves from now on in place of the life
    ``replaced`` (None: there was none, the last one had ended already), for ``reason`` (the
    restart's). ``idle`` is how long the spare had been ready; ``woke`` how long waking it from
    sleep took (None: it was awake). ``planned``: a handover (a recycle, a remote restart), for
    which no ``Restarting`` was published: the replaced life ends once its requests are done."""

    kind: ClassVar[str] = vocab.PROMOTED
    replaced: str | None
    reason: str
    idle: float
    woke: float | None = None
    planned: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class LifeEnded(ServerEvent):
    kind: ClassVar[str] = "life_ended"
    reason: str
    exit_code: int | None
    age_seconds: float
    age_requests: int
    age_tokens: int


Subscriber = Callable[[Event], None]


class EventBus:
    """Synchronous fan-out. A subscriber must be quick and must not raise; if it does, the error
    is logged and the other subscribers still get the event."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        self._subscribers.append(fn)

        def unsubscribe() -> None:
            if fn in self._subscribers:
                self._subscribers.remove(fn)

        return unsubscribe

    def publish(self, event: Event) -> None:
        for fn in list(self._subscribers):
            try:
                fn(event)
            except Exception:
                log.exception("event subscriber failed on %s", event.kind)
