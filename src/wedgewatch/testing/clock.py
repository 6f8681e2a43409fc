"""A clock that moves only when the test says so."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable


class _Timer:
    __slots__ = ("cancelled", "fn")

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A ``wedgewatch.base.clock.Clock`` for tests: ``clock()`` is whatever the test set, and timers and
    sleepers fire, in order, as ``advance`` passes their time. Give it to ``Proxy(clock=...)`` or
    ``Supervisor(clock=...)`` and a 60 s deadline costs no real second."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._due: list[tuple[float, int, _Timer]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self._now

    def call_later(self, delay: float, fn: Callable[[], None]) -> _Timer:
        timer = _Timer(fn)
        heapq.heappush(self._due, (self._now + max(0.0, delay), next(self._seq), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        timer = self.call_later(seconds, wake)
        try:
            await fut
        finally:
            timer.cancel()

    def pending(self) -> int:
        """Timers and sleepers still waiting."""
        return sum(1 for *_, t in self._due if not t.cancelled)

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, firing each timer due on the way at its own time, and
        let the tasks it woke run before going on."""
        target = self._now + seconds
        while self._due and self._due[0][0] <= target:
            when, _, timer = heapq.heappop(self._due)
            self._now = max(self._now, when)
            if not timer.cancelled:
                timer.fn()
                await settle()
        self._now = target
        await settle()


async def settle(rounds: int = 20) -> None:
    """Let every task that is ready run (a few turns of the loop); no real time passes."""
    for _ in range(rounds):
        await asyncio.sleep(0)
