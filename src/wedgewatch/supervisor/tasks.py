"""The supervisor's background tasks: spawned in its loop, cancelled together, never silent."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Background:
    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("supervisor task failed", exc_info=task.exception())

    async def cancel_all(self) -> None:
        """Cancel every task but the caller's own, and wait until they have finished."""
        current = asyncio.current_task()
        pending = [t for t in self.tasks if t is not current]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def call_in_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn`` in ``loop``: at once from the loop's own thread, else thread-safely soon.
    Dropped when the loop is not known yet (nothing to supervise before ``start``)."""
    if loop is None:
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        fn(*args)
    else:
        loop.call_soon_threadsafe(fn, *args)
