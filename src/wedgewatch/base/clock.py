"""Time as an input: the ``Clock`` the proxy and the supervisor read *and* wait on.

Reading and waiting through one object is what lets a test replace real time whole: with
``wedgewatch.testing.ManualClock`` a deadline of 60 s fires when the test advances the clock by 60,
in no real time at all (trio's MockClock lesson). ``SYSTEM`` is the real thing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """``clock()`` reads monotonic seconds; ``sleep`` and ``call_later`` wait on the same time."""

    def __call__(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer: ...


class SystemClock:
    """``time.monotonic`` and the running event loop's own timers."""

    def __call__(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(delay, fn)


SYSTEM = SystemClock()
