"""The loop every long-running command shares: start something while watching for a stop
signal, then wait for whichever comes first, the work's end or the signal.

``serve``, ``wrap`` and ``proxy`` each start a stack (or a proxy), wait on something (a pool that
gave up, a harness's exit, nothing at all) and stop it. Written once here, so that each gets the
same signals (SIGINT, SIGTERM, and SIGHUP: a closed terminal or a dropped SSH session is a stop,
not a crash that leaves a server running) and the same cancellation of a start cut short.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
INTERRUPTED = 130
"""The exit code of a command stopped by a signal before its work ended (the shell's 128 + SIGINT)."""


class Stop:
    """The stop signals, turned into one event for as long as the ``stopping()`` block lasts."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    async def first(self, work: Awaitable[T]) -> T | None:
        """``work``'s result, or None when a stop came first (``work`` is then cancelled and
        awaited, so whatever it started is unwound before the caller stops the rest). A stop
        that arrives after ``work`` is done does not hide its result; ``work``'s exception
        propagates."""
        task = asyncio.ensure_future(work)
        waiter = asyncio.ensure_future(self.event.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return None


@contextlib.asynccontextmanager
async def stopping() -> AsyncIterator[Stop]:
    """Install the stop signals' handlers on the running loop for the block's duration."""
    loop = asyncio.get_running_loop()
    stop = Stop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.event.set)
    try:
        yield stop
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
