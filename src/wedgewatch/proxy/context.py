"""What every request handler of one proxy shares, and the small helpers they all use."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from wedgewatch.config import WatchdogConfig
from wedgewatch.events import EventBus
from wedgewatch.protocols import Upstream
from wedgewatch.proxy.metrics import ProxyMetrics
from wedgewatch.proxy.records import RecordSink

if TYPE_CHECKING:
    from wedgewatch.proxy.exchange import Exchange

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


@dataclass
class Context:
    session: aiohttp.ClientSession
    upstream: Upstream
    cfg: WatchdogConfig
    clock: Callable[[], float]
    bus: EventBus
    sink: RecordSink
    metrics: ProxyMetrics
    inflight: dict[str, Exchange] = field(default_factory=dict)
    # Request ids: 64 random bits from a generator of our own, seeded from the OS once (not one
    # urandom call per request), and immune to anyone seeding the global ``random``.
    ids: random.Random = field(default_factory=random.Random)


def upstream_headers(headers: Mapping[str, str], *, drop: Iterable[str] = ()) -> CIMultiDict[str]:
    """The client's headers as sent upstream: Authorization included, hop-by-hop ones not."""
    skip = _HOP | {d.lower() for d in drop}
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in skip)


def client_headers(headers: Mapping[str, str], *, drop: Iterable[str] = ()) -> CIMultiDict[str]:
    """The upstream's response headers as sent to the client."""
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
