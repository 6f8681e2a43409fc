"""The trivial ``Upstream`` (a fixed URL that nobody supervises), and how a request is sent to one."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import aiohttp

from wedgewatch.base.protocols import LifeInfo

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
