"""Every request that is not a generation (``/v1/models``, ``/health``, ``/metrics``, ``/version``,
``/tokenize``, ...) goes upstream as it came, under ``passthrough_timeout``. Bodies are relayed
undecoded; an upstream that cannot be reached gets a non-retryable OpenAI-shaped error."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from wedgewatch.proxy.context import Context, client_headers, error_object, error_response, upstream_headers


async def passthrough(ctx: Context, request: web.Request, path: str) -> web.StreamResponse:
    url = ctx.upstream.base_url.rstrip("/") + path
    if request.query_string:
        url += "?" + request.query_string
    data = await request.read() if request.can_read_body else None
    timeout = aiohttp.ClientTimeout(total=ctx.cfg.passthrough_timeout)
    try:
        async with ctx.session.request(
            request.method,
            url,
            data=data,
            headers=upstream_headers(request.headers),
            timeout=timeout,
            auto_decompress=False,
            allow_redirects=False,
        ) as resp:
            body = await resp.read()
            return web.Response(status=resp.status, body=body, headers=client_headers(resp.headers))
    except TimeoutError:
        msg = f"upstream did not answer {request.method} {path} within {ctx.cfg.passthrough_timeout:g} s"
        return error_response(504, error_object("upstream_error", "timeout", msg))
    except (aiohttp.ClientError, OSError) as exc:
        msg = f"upstream connection failed on {request.method} {path}: {type(exc).__name__}: {exc}"
        return error_response(502, error_object("upstream_error", "connection", msg))
