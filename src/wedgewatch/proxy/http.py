"""The HTTP pieces every proxy handler uses: the one header filter and the one error shape."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

REQUEST_ID_HEADER = "x-wedgewatch-request-id"
NO_RETRY = {"x-should-retry": "false"}

# Hop-by-hop headers (RFC 9110 7.6.1) and those aiohttp recomputes; never copied across the proxy.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


def forward_headers(headers: Mapping[str, str], *, drop: Iterable[str] = ()) -> CIMultiDict[str]:
    """Headers as copied across the proxy, either way: end-to-end ones only (Authorization
    included, to the server), less ``drop``."""
    skip = _HOP | {d.lower() for d in drop}
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in skip)


def error_object(err_type: str, code: str, message: str) -> dict[str, Any]:
    """The OpenAI error shape; ``code`` is the stall kind or the infrastructure reason."""
    return {"error": {"type": err_type, "code": code, "message": message, "param": None}}


def error_response(status: int, obj: Mapping[str, Any], request_id: str | None = None) -> web.Response:
    """A JSON error the OpenAI SDK raises on at once: ``x-should-retry: false`` stops its retries."""
    headers = dict(NO_RETRY)
    if request_id:
        headers[REQUEST_ID_HEADER] = request_id
    return web.Response(
        status=status,
        body=json.dumps(obj, separators=(",", ":")).encode(),
        content_type="application/json",
        headers=headers,
    )


def cut_short(request: web.Request) -> None:
    """End a begun stream that failed (its error event written) without HTTP/1.1's last chunk:
    the connection closes once the written bytes are flushed, so the response is an incomplete
    message (RFC 9112 §7.1), as nginx ends one whose upstream failed mid-body. The status was 200
    and cannot change; this is what a client that does not read the error event sees: curl exits
    18 (``transfer closed with outstanding read data remaining``), requests, httpx and aiohttp
    raise. The SDKs raise on the error event before they come to the end (docs/wrap.md)."""
    if request.transport is not None:
        request.transport.close()
