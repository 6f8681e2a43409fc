"""The engine's heartbeat: one scrape reduced to a ``Reading``, the rules that read it, and the
``Feed`` that carries readings from whoever scrapes (the supervisor, or a standalone proxy) to
whoever judges requests by them (the proxy).

Token counters alone cannot tell a long prefill from a wedge (vLLM v1 counts prompt tokens when a
prefill ends), so a reading also carries the *heartbeat*: series that change on every engine step,
prefill chunks included (vLLM's KV-cache usage, SGLang's realtime token counter, llama.cpp's
decode counter; sources in docs/supervisor.md). Everything here is pure: readings and a ``now``
come in, decisions go out; scraping lives in the objects that own the I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reading:
    """One scrape, reduced to what the rules need."""

    at: float  # the scraper's clock (monotonic)
    wall: float  # time.time(), for the ledger
    tokens: float | None  # sum of the token counters
    generated: float | None  # the first counter: tokens generated
    running: float | None
    waiting: float | None
    beat: tuple[float | None, ...] = ()  # the heartbeat series, in the profile's order
    preemptions: float | None = None  # requests sent back to waiting so far
    # What the proxy in front knows, whatever the server's gauges say (``ProxyView``): requests it
    # holds waiting on this server, and tokens it has relayed from it so far.
    held: int = 0
    relayed: int = 0

    def as_row(self) -> list[Any]:
        return [round(self.wall, 3), self.tokens, self.running, self.waiting]

    def has_work(self) -> bool:
        """Requests running or waiting, or held by the proxy: a wedged engine stops scheduling, so
        a queue that only grows while nothing moves is a wedge too; and an engine can wedge with
        its gauges at 0 (vLLM #46811), or never see a request sent while it is stopped, so the
        requests the proxy holds on it are work whatever the gauges read."""
        return (self.running or 0) > 0 or (self.waiting or 0) > 0 or self.held > 0

    def moved_since(self, prev: Reading) -> bool:
        """The token counters, the heartbeat or the tokens the proxy relayed changed between
        ``prev`` and this reading (a server whose counters lag is not still while its streams
        flow)."""
        return (
            self.tokens != prev.tokens
            or self.beat != prev.beat
            or self.preemptions != prev.preemptions
            or self.relayed != prev.relayed
        )


@dataclass(frozen=True, slots=True)
class Tick:
    """What one new reading says about the interval since the previous one."""

    dt: float  # seconds since the previous reading (0 for the first)
    stepping: bool  # the engine moved in the interval
    waiting: int  # requests the server holds in its queue (preempted ones included)
    preempted: int  # requests preempted in the interval
    still_for: float  # seconds nothing has moved while work was present (0 when moving or idle)
    life_id: str | None = None


class EngineClock:
    """Turns successive readings of one server into ``Tick``s. A new life (another ``life_id``)
    starts afresh; a reading without the heartbeat series counts as stepping, so the proxy falls
    back to treating time as engine time rather than stopping its clocks."""

    def __init__(self) -> None:
        self._prev: Reading | None = None
        self._life: str | None = None
        self._still_since: float | None = None

    def observe(self, r: Reading, life_id: str | None = None) -> Tick:
        prev = self._prev if life_id == self._life else None
        self._prev, self._life = r, life_id
        waiting = int(r.waiting or 0)
        if prev is None:
            self._still_since = r.at if r.has_work() else None
            return Tick(0.0, True, waiting, 0, 0.0, life_id)
        dt = max(0.0, r.at - prev.at)
        moved = r.moved_since(prev) or not r.beat
        preempted = int(max(0.0, (r.preemptions or 0) - (prev.preemptions or 0)))
        if moved or not r.has_work():
            self._still_since = r.at if r.has_work() else None
            return Tick(dt, moved, waiting, preempted, 0.0, life_id)
        if self._still_since is None:
            self._still_since = r.at
        return Tick(dt, False, waiting, preempted, r.at - self._still_since, life_id)


ReadingListener = Callable[[Reading, str | None], None]
StoppedListener = Callable[[dict[str, Any], str | None], None]


class Feed:
    """Readings and the engine-stopped verdict of one server, fanned out in-process. The
    supervisor publishes into one after every scrape (and when it finds a wedge); a standalone
    proxy fills its own. ``window`` is the window the publisher judges with; ``heartbeat`` says
    whether its readings carry a heartbeat (engine-time deadlines need one)."""

    def __init__(self, window: float, heartbeat: bool = True) -> None:
        self.window = window
        self.heartbeat = heartbeat
        self._readings: list[ReadingListener] = []
        self._stopped: list[StoppedListener] = []

    def subscribe(self, on_reading: ReadingListener, on_stopped: StoppedListener) -> Callable[[], None]:
        self._readings.append(on_reading)
        self._stopped.append(on_stopped)

        def unsubscribe() -> None:
            if on_reading in self._readings:
                self._readings.remove(on_reading)
            if on_stopped in self._stopped:
                self._stopped.remove(on_stopped)

        return unsubscribe

    def reading(self, r: Reading, life_id: str | None = None) -> None:
        for fn in list(self._readings):
            try:
                fn(r, life_id)
            except Exception:
                log.exception("heartbeat listener failed")

    def stopped(self, evidence: dict[str, Any], life_id: str | None = None) -> None:
        for fn in list(self._stopped):
            try:
                fn(evidence, life_id)
            except Exception:
                log.exception("heartbeat listener failed on a stop")
