"""``eventually``: the one poll loop tests need, written once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.01, what: str = ""
) -> T:
    """Call ``predicate`` until it returns something truthy, and return that; ``AssertionError``
    naming ``what`` (or the predicate) when ``timeout`` real seconds pass first. The interval grows
    to 0.1 s, so a long wait costs little CPU."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not true within {timeout} s: {what or _name(predicate)}")
        time.sleep(interval)
        interval = min(interval * 1.5, 0.1)


async def eventually_async(
    predicate: Callable[[], T | Awaitable[T]], timeout: float = 10.0, interval: float = 0.01, what: str = ""
) -> T:
    """``eventually`` inside an event loop: the predicate may be a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not true within {timeout} s: {what or _name(predicate)}")
        await asyncio.sleep(interval)
        interval = min(interval * 1.5, 0.1)


def _name(fn: Callable[..., object]) -> str:
    return getattr(fn, "__qualname__", repr(fn))
