"""The trivial ``Upstream`` (a fixed URL that nobody supervises), and how a request is sent to one."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

import aiohttp

from wedgewatch.protocols import LifeInfo, Replaceable, Upstream

log = logging.getLogger(__name__)

_CLOSED_UNANSWERED = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)


async def post(
    session: aiohttp.ClientSession, url: str, payload: bytes, headers: Mapping[str, str], request_id: str
) -> aiohttp.ClientResponse:
    """POST ``payload``; once more on a new connection if the server closed the first unanswered.

    That is a kept-alive connection the server closed as we wrote on it (uvicorn and llama.cpp
    drop idle ones after 5 s). No byte came back, and a generation changes nothing on the server,
    so it may be sent again (RFC 9110 9.2.2). A refused connection is not retried: the server is
    gone, and the supervisor wants to hear it at once.
    """
    try:
        return await session.post(url, data=payload, headers=headers)
    except _CLOSED_UNANSWERED as exc:
        if isinstance(exc, aiohttp.ClientConnectorError):
            raise
        log.info("%s: upstream closed the connection unanswered (%s); sent again", request_id, exc)
    return await session.post(url, data=payload, headers=headers)


async def wait_for_life(upstream: Upstream, wait: float) -> tuple[float, str | None]:
    """Before a request is sent: when the upstream is between lives, wait up to ``wait`` seconds
    for the next ready one. Returns (seconds waited, None), or (seconds waited, why) when no life
    came: the request then fails as a ``connection`` error without reaching a dead address.

    Without this, a request that arrives during a restart goes to the old life's address, which
    refuses it within milliseconds, and the harness scores a model failure for a restart.
    """
    if not isinstance(upstream, Replaceable) or upstream.life() is not None:
        return 0.0, None
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(wait):
            await upstream.wait_ready()
    except TimeoutError:
        return time.monotonic() - t0, f"no ready server life within restart_wait ({wait:g} s)"
    except Exception as exc:  # the supervisor gave up, or is stopping
        return time.monotonic() - t0, f"no server life: {exc}"
    return time.monotonic() - t0, None


class StaticUpstream:
    """A fixed server root (``http://127.0.0.1:8000``; a trailing ``/v1`` is dropped)."""

    def __init__(self, url: str) -> None:
        url = url.rstrip("/")
        self._url = url.removesuffix("/v1")

    @property
    def base_url(self) -> str:
        return self._url

    def life(self) -> LifeInfo | None:
        return None

    def __repr__(self) -> str:
        return f"StaticUpstream({self._url!r})"
