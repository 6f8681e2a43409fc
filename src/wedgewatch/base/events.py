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
    └── ServerEvent           from the supervisor, about one life (life_id)
        ├── ServerStarting    a life is being started (reason)
        ├── ServerReady       a life is ready and warmed (base_url)
        ├── Restarting        a life is being replaced (reason); sent before its group dies
        ├── Wedged            no token progress with work in flight (evidence)
        └── Crashed           the process exited (exit_code, log_tail)
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    kind: ClassVar[str] = "event"
    attempt_id: str | None = None
    ts: float = field(default_factory=time.time)

    @property
    def detail(self) -> dict[str, Any]:
        """The event's own fields (not ``attempt_id``, not ``ts``) as a dict."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("attempt_id", "ts")
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


# --- from the supervisor --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerEvent(Event):
    life_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerStarting(ServerEvent):
    kind: ClassVar[str] = "server_starting"
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerReady(ServerEvent):
    kind: ClassVar[str] = "server_ready"
    base_url: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Restarting(ServerEvent):
    kind: ClassVar[str] = "restart"
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Wedged(ServerEvent):
    kind: ClassVar[str] = "wedge"
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Crashed(ServerEvent):
    kind: ClassVar[str] = "crash"
    exit_code: int | None = None
    log_tail: str = ""


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
