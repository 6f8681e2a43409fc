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
