"""In-process events: how the proxy tells the supervisor (and the supervisor the runner) what
happened, without either importing the other.

Kinds in use (``Event.kind``):
- ``stall``: the proxy aborted a request (detail: stall kind, attempt_id, request_id, numbers)
- ``upstream_error``: the server answered 5xx or the connection failed (detail: reason, status)
- ``request_ok``: a request through the proxy finished with tokens
- ``wedge``, ``crash``, ``restart``, ``server_ready``, ``server_stopping``: from the supervisor
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    detail: dict[str, Any] = field(default_factory=dict)
    attempt_id: str | None = None
    ts: float = field(default_factory=time.time)


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
