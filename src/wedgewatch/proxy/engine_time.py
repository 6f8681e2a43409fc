"""The proxy's side of the heartbeat: engine time handed to every request in flight, the
engine-stopped verdict turned into stalls, and (standalone) a scraper of the server's /metrics.

After each reading the in-flight requests of that server life are charged the interval: a
request counts as waiting when it is among the last ``waiting`` to arrive (vLLM and SGLang queue
first come, first served, and a preempted request is the latest admitted, sent to the front of
the queue: so the queue always holds the latest arrivals), and the newest running ones are the
ones a preemption counter's rise sent back. Requests of other clients can only make that
estimate generous, never tighter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp

from wedgewatch.wire import promtext
from wedgewatch.wire.heartbeat import EngineClock, Feed, Reading

if TYPE_CHECKING:
    from wedgewatch.proxy.exchange import Exchange

log = logging.getLogger(__name__)


_CLOCKS_KEPT = 64
"""Engine clocks (one per server life heard from) kept before those of idle lives are dropped."""


class EngineWatch:
    """Charges engine time to a proxy's requests and stops them all on a verdict. With
    ``engine`` off (the watchdog keeps wall-clock deadlines) it does neither: such a proxy keeps
    today's rules exactly, and a restart is what cuts its requests."""

    def __init__(
        self, inflight: Mapping[str, Exchange], clock: Callable[[], float], feed: Feed, engine: bool
    ) -> None:
        self.inflight = inflight  # the proxy's registry, in arrival order
        self.clock = clock
        self.feed = feed
        self.engine = engine
        # One per server life: a pool's members report on one feed, each reading its own life's.
        self._clocks: dict[str | None, EngineClock] = {}
        self._unsubscribe = feed.subscribe(self._on_reading, self._on_stopped)

    def close(self) -> None:
        self._unsubscribe()

    def _of(self, life_id: str | None) -> list[Exchange]:
        return [
            ex
            for ex in list(self.inflight.values())
            if life_id is None or ex.life is None or ex.life.life_id == life_id
        ]

    def _on_reading(self, r: Reading, life_id: str | None) -> None:
        if not self.engine:
            return
        clock = self._clocks.get(life_id)
        if clock is None:
            if len(self._clocks) >= _CLOCKS_KEPT:  # ended lives' clocks, once there are many
                busy = {ex.life.life_id for ex in self.inflight.values() if ex.life is not None}
                self._clocks = {k: v for k, v in self._clocks.items() if k in busy}
            clock = self._clocks[life_id] = EngineClock()
        tick = clock.observe(r, life_id)
        exs = self._of(life_id)
        now = self.clock()
        queued_from = max(0, len(exs) - tick.waiting)
        preempted_from = max(0, queued_from - tick.preempted)
        for i, ex in enumerate(exs):
            stall = ex.watch.charge(now, tick.dt, tick.stepping, i >= queued_from, i >= preempted_from)
            if stall is not None:
                ex.stalled(stall)

    def _on_stopped(self, evidence: dict[str, Any], life_id: str | None) -> None:
        if not self.engine:
            return
        now = self.clock()
        window = float(evidence.get("window", self.feed.window))
        still = float(evidence.get("flat_seconds", window))
        for ex in self._of(life_id):
            ex.stalled(ex.watch.engine_stopped(now, still, window))


# Every profile's series (docs/supervisor.md): a standalone proxy does not know which server it
# fronts, so it reads whichever are present.
TOKEN_SERIES = (
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:prompt_tokens_total",
    "llamacpp:tokens_predicted_total",
    "llamacpp:prompt_tokens_total",
)
HEARTBEAT_SERIES = (
    "vllm:kv_cache_usage_perc",
    "vllm:iteration_tokens_total_count",
    "sglang:realtime_tokens_total",
    "sglang:token_usage",
    "llamacpp:n_decode_total",
)
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred")
PREEMPTIONS = ("vllm:num_preemptions_total", "sglang:num_retracted_reqs")  # SGLang's is a gauge


def _first(samples: promtext.Samples, names: tuple[str, ...]) -> float | None:
    for n in names:
        v = samples.total(n)
        if v is not None:
            return v
    return None


def read_any(samples: promtext.Samples, at: float, held: int = 0, relayed: int = 0) -> Reading:
    """A reading from whichever known series the server exposes, with what the proxy ``held``
    on it and ``relayed`` from it."""
    tokens = [v for v in (samples.total(n) for n in TOKEN_SERIES) if v is not None]
    beat = tuple(samples.total(n) for n in HEARTBEAT_SERIES if n in samples)
    return Reading(
        at=at,
        wall=time.time(),
        tokens=sum(tokens) if tokens else None,
        generated=tokens[0] if tokens else None,
        running=_first(samples, RUNNING),
        waiting=_first(samples, WAITING),
        beat=beat,
        preemptions=_first(samples, PREEMPTIONS),
        held=held,
        relayed=relayed,
    )


class Scraper:
    """``wedgewatch proxy --metrics-url``: scrapes every ``interval`` seconds into ``feed`` and
    gives the engine-stopped verdict itself: work present, nothing moved (or /metrics silent)
    for ``feed.window`` seconds. One verdict per still stretch.

    ``busy`` says whether the proxy has requests in flight: a server frozen between two scrapes,
    just after a request arrived, leaves a last reading without work, and its /metrics then
    never answers again; the proxy's own requests are the work that reading missed."""

    def __init__(
        self,
        url: str,
        feed: Feed,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        busy: Callable[[], bool] = lambda: False,
        view: Callable[[], tuple[int, int]] = lambda: (0, 0),
    ):
        self.url = url
        self.feed = feed
        self.interval = interval
        self.clock = clock
        self.busy = busy
        # What the proxy holds on the server and has relayed from it (``Proxy.held_on``): work
        # and movement in every reading, whatever the server's gauges say.
        self.view = view
        self.headers: dict[str, str] | None = None  # the server's own key, when it wants one
        self._last: Reading | None = None
        self._still_since: float | None = None
        self._fired = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def observe(self, r: Reading | None, now: float) -> dict[str, Any] | None:
        """One scrape's result (None: it failed); the verdict's evidence when it is reached."""
        if r is not None:
            self.feed.reading(r)
            last, self._last = self._last, r
            if not r.has_work():
                self._still_since, self._fired = None, False
                return None
            if last is None or r.moved_since(last) or not r.beat or self._still_since is None:
                self._still_since, self._fired = r.at, False
                return None
            still = r.at - self._still_since
        elif self._last is not None and self._last.has_work() and self._still_since is not None:
            still = now - self._still_since  # /metrics silent: the still stretch goes on
        elif self._last is not None and self.busy():
            # Silent since a reading without work, with requests in flight: the engine has not
            # been heard from since that reading, the earliest it can have stopped.
            if self._still_since is None:
                self._still_since, self._fired = self._last.at, False
            still = now - self._still_since
        else:
            return None
        if still < self.feed.window or self._fired:
            return None
        self._fired = True
        evidence = {"source": "proxy", "flat_seconds": round(still, 3), "window": self.feed.window}
        self.feed.stopped(evidence)
        return evidence

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=max(0.5, min(2.0, self.interval * 2)))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                r: Reading | None = None
                try:
                    async with session.get(self.url, headers=self.headers) as resp:
                        if resp.status == 200:
                            held, relayed = self.view()
                            r = read_any(promtext.parse(await resp.text()), self.clock(), held, relayed)
                except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
                    log.debug("metrics scrape of %s failed: %s", self.url, exc)
                evidence = self.observe(r, self.clock())
                if evidence is not None:
                    log.warning("engine stopped at %s: %s", self.url, evidence)
                await asyncio.sleep(self.interval)
