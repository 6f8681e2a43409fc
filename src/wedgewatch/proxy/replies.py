"""Every reply judged: what the proxy makes of an upstream answer that is not the API's answer (a
whole body that is not the API's JSON, an error event inside a stream).

An evaluation scores whatever reaches the agent. An HTML page with HTTP 200, a body that is not
the API's JSON, or an engine's error event after the stream began is the server's failure, and
recording it ``ok`` would let a broken server pass for a weak model. Each verdict is an outcome
from the vocabulary; the stream's own events are judged by the dialects (``dialects/``).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from wedgewatch.base.vocab import (
    CLIENT_ERROR,
    REPLY_NOT_API,
    REPLY_NOT_JSON,
    REPLY_NOT_SSE,
    STREAM_ERROR_EVENT,
)
from wedgewatch.proxy.dialects.chat_bytes import error_code, snippet
from wedgewatch.proxy.dialects.kind import Kind
from wedgewatch.proxy.dialects.whole import is_answer


def whole_body(
    kind: Kind, content_type: str, data: bytes, streamed: bool
) -> tuple[dict[str, Any] | None, tuple[str, str] | None]:
    """A whole body answering with HTTP 2xx: its JSON object when it is the API's own answer
    (passed on as it is), else the fault's outcome and message. ``streamed``: the client asked for
    a stream (a server that ignored it sends a whole answer, which is passed on too; anything else
    is neither SSE nor the API's JSON)."""
    try:
        obj = json.loads(data)
    except ValueError:
        obj = None
    if is_answer(kind, obj):
        return obj, None
    shown = f"{content_type or 'no content type'}, {len(data)} bytes: {snippet(data)}"
    if obj is None:
        if streamed and data.strip():
            why = f"the upstream answered a stream request with neither SSE nor JSON ({shown})"
            return None, (REPLY_NOT_SSE, why)
        return None, (REPLY_NOT_JSON, f"the upstream's answer is not JSON ({shown})")
    return None, (REPLY_NOT_API, f"the upstream answered with JSON that is not the API's answer ({shown})")


def error_verdict(obj: Any, begun: bool) -> tuple[str, int, str | None]:
    """An error object the upstream sent inside its stream, as (outcome, code, message).

    Before anything reached the client, an error with a 4xx code is the request's own fault
    (``client_error``, answered with that code): SGLang, for one, validates some requests inside
    the stream. Any other error, and any error once tokens have gone out, is the server's
    (``stream_error_event``): vLLM reports an engine that died mid-stream this way, after its 200,
    with whatever code its handler chose."""
    code = error_code(obj)
    err = obj.get("error") if isinstance(obj, dict) else None
    message = err.get("message") if isinstance(err, dict) else None
    if code < 500 and not begun:
        return CLIENT_ERROR, code, message
    return STREAM_ERROR_EVENT, code, message


async def read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes | None:
    """The whole body, or None when it is longer than ``cap`` bytes (what was read is dropped)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > cap:
            return None
        parts.append(chunk)
    return b"".join(parts)
