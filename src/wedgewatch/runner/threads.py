"""Work on a thread of its own whose result an event loop awaits: an attempt's agent (the local
executor) or an evaluation."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def run_in_thread(loop: asyncio.AbstractEventLoop, fn: Callable[[], T], name: str) -> asyncio.Future[T]:
    """Run ``fn`` in a new daemon thread; the future gets its result. Whoever resolves the future
    first wins (a restart may end an attempt before its thread returns)."""
    fut: asyncio.Future[T] = loop.create_future()

    def deliver(value: T | None, exc: BaseException | None) -> None:
        if fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)  # type: ignore[arg-type]

    def target() -> None:
        try:
            value = fn()
        except BaseException as exc:
            loop.call_soon_threadsafe(deliver, None, exc)
        else:
            try:
                loop.call_soon_threadsafe(deliver, value, None)
            except RuntimeError:
                pass  # the loop is closed: the run is over and nobody waits for this thread

    # The thread runs in a copy of the caller's context, so it inherits the run's process-group
    # list (``sandbox.groups.scope``) and the commands it starts are killed with the run.
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(target,), name=name, daemon=True).start()
    return fut
