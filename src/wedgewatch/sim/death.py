"""An engine that dies as vLLM's does on ``EngineDeadError`` (a CUDA error, an out-of-memory in the
engine, a killed EngineCore): the scenario action ``engine_death``.

vLLM 0.32, read in its source (``v1/engine/core_client.py``, ``entrypoints/launchers/launcher.py``,
``entrypoints/serve/instrumentator/health.py``): the engine's monitor marks it dead and every
request in flight gets the error at once. A chat or completion stream gets the error object as its
last ``data:`` line, then ``[DONE]``, after its HTTP 200; a Messages stream (converted from a chat
stream) an ``event: error``; a Responses stream's generator raises, so its connection is cut; a
request that did not ask for a stream gets HTTP 500. ``/health`` answers 503 from that moment,
every new generation gets 500, ``/metrics`` still answers (frozen), and the API server's watchdog
(every 5 s) shuts it down: the process exits a few seconds later (``exit_delay``), with
``exit_code``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from aiohttp import web

from wedgewatch.base import vocab
from wedgewatch.sim import broken
from wedgewatch.sim.parse import Kind
from wedgewatch.sim.rejected import error_response

log = logging.getLogger(__name__)

ENGINE_DEATH = vocab.ENGINE_DEATH
"""The scenario action, and what the fault log says of each request the death struck: the word
the proxy writes in the rows of the requests it holds for the next life (their ``blame``)."""


def dead_engine() -> web.Response:
    """What vLLM answers a generation once its engine is dead: HTTP 500 with its error object."""
    return error_response(500, broken.ENGINE_DEAD)


async def answer(request: web.Request, resp: web.StreamResponse | None, kind: Kind) -> web.StreamResponse:
    """End one request in flight on the engine that died, as vLLM ends it (``resp``: its begun
    stream, None for a request that did not ask for one; ``kind``: its API)."""
    if resp is None:
        return dead_engine()
    try:
        if kind == "responses":
            if request.transport is not None:
                request.transport.close()  # the generator raised inside a begun body
        else:
            await resp.write(broken.error_event(kind))
            await resp.write_eof()
    except ConnectionError:
        pass  # the client went first
    return resp


def exit_later(loop: asyncio.AbstractEventLoop, code: int, delay: float) -> None:
    """The API server's watchdog ends the process ``delay`` seconds after the death."""
    log.error("fault: the engine is dead; the server exits with code %d in %.3f s", code, delay)
    loop.call_later(delay, _exit, code)


def _exit(code: int) -> None:
    for h in logging.getLogger().handlers:
        h.flush()
    sys.stderr.flush()
    os._exit(code)
