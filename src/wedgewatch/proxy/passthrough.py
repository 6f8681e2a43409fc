"""Every request that is not a watched generation (``/v1/models``, ``/health``, ``/metrics``,
``/tokenize``, ``/v1/embeddings``, a background ``/v1/responses``, ...) goes upstream as it came.

Bodies are relayed undecoded and as they arrive, so a streaming endpoint the proxy does not watch
still streams. A read (GET, HEAD) has ``passthrough_timeout``; anything else may be a generation
the proxy cannot see into, so it gets the whole-request deadline, ``total_timeout``, instead of
being cut at 10 s. An upstream that cannot be reached gets a non-retryable OpenAI-shaped error.
vLLM's sleep routes are refused (403): a sleeping spare life is the supervisor's to wake.
"""

from __future__ import annotations

import logging

import aiohttp
from aiohttp import web

from wedgewatch.base.protocols import Upstream
from wedgewatch.proxy.http import error_object, error_response, forward_headers
from wedgewatch.proxy.shared import Shared

log = logging.getLogger(__name__)

_READS = frozenset({"GET", "HEAD"})


OPERATORS = frozenset({"/sleep", "/wake_up"})
"""vLLM's sleep routes (dev mode only): the supervisor's, for a spare life it keeps asleep, never a
client's. Passed on, a client could put the serving engine to sleep."""


async def passthrough(ctx: Shared, request: web.Request, path: str, upstream: Upstream) -> web.StreamResponse:
    if request.method == "POST" and path in OPERATORS:
        msg = f"{path} is the supervisor's (vLLM's sleep mode), not passed on"
        return error_response(403, error_object("invalid_request_error", "not_passed_on", msg))
    url = upstream.base_url.rstrip("/") + path
    if request.query_string:
        url += "?" + request.query_string
    # body_exists, not can_read_body: a Responses API body the dispatcher read is cached, not gone.
    data = await request.read() if request.body_exists else None
    deadline = ctx.cfg.passthrough_timeout if request.method in _READS else ctx.cfg.total_timeout
    out: web.StreamResponse | None = None
    try:
        async with ctx.session.request(
            request.method,
            url,
            data=data,
            # aiohttp decoded a compressed request body on read: it goes on plain.
            headers=forward_headers(request.headers, drop=("content-encoding",)),
            timeout=aiohttp.ClientTimeout(total=deadline),
            auto_decompress=False,
            allow_redirects=False,
        ) as resp:
            out = web.StreamResponse(status=resp.status, headers=forward_headers(resp.headers))
            await out.prepare(request)
            async for chunk in resp.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out
    except TimeoutError:
        msg = f"upstream did not finish {request.method} {path} within {deadline:g} s"
        return _failed(request, out, 504, "timeout", msg)
    except (aiohttp.ClientError, OSError) as exc:
        msg = f"upstream connection failed on {request.method} {path}: {type(exc).__name__}: {exc}"
        return _failed(request, out, 502, "connection", msg)


def _failed(
    request: web.Request, out: web.StreamResponse | None, status: int, code: str, message: str
) -> web.StreamResponse:
    if out is None:
        return error_response(status, error_object("upstream_error", code, message))
    # The answer had begun: close the connection before its last chunk, which every HTTP client
    # reads as a cut body, not a complete one.
    log.info("passthrough cut: %s", message)
    if request.transport is not None:
        request.transport.close()
    return out
