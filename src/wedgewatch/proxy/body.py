"""The client's request body: read within its deadline, and what goes upstream.

A streaming request goes with ``include_usage`` added (chat and completions), which gives its row
its token counts; what the client itself asked for is kept, so its stream has the shape it
expects. A non-streaming request goes as the client sent it, byte for byte: its answer comes back
whole and is passed on as the server gave it, so none of the fields of the server's own
non-streaming answer (vLLM's ``prompt_logprobs``, ``message.reasoning``, ...) that no chunk of a
stream carries is lost (docs/proxy.md, "Non-streaming answers").
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from aiohttp import web

from wedgewatch.base.clock import Clock


@dataclass(frozen=True, slots=True)
class Asked:
    body: dict[str, Any]  # as sent upstream
    payload: bytes  # ``body`` encoded: the client's own bytes when it asked for no stream
    model: str | None
    client_stream: bool
    want_usage: bool  # the client asked for the usage chunk itself


class Refused(NamedTuple):
    """A body the proxy cannot send on: the client's error, answered 400 with this code."""

    code: str
    message: str


_NOT_OBJECT = Refused("invalid_json", "the request body is not a JSON object")


def rewrite(raw: bytes, usage_option: bool = True) -> Asked | Refused:
    """What goes upstream, or the client's error when the body cannot be sent on (answered 400):
    not a JSON object, or a ``stream`` that is not a boolean (the proxy must know whether to
    watch a stream or wait for one answer). A streaming body gets ``include_usage`` beside the
    client's other ``stream_options``, unless ``usage_option`` is off (the Responses and Messages
    APIs: those streams always carry the usage, and their servers do not take
    ``include_usage``); a non-streaming one goes unchanged, as ``raw``."""
    try:
        body = json.loads(raw)
    except ValueError:
        return _NOT_OBJECT
    if not isinstance(body, dict):
        return _NOT_OBJECT
    if body.get("stream") not in (None, True, False):
        return Refused(
            "invalid_stream", f"stream must be true or false, not {json.dumps(body['stream'])[:40]}"
        )
    model = body.get("model")
    client_stream = body.get("stream") is True
    opts = body.get("stream_options")
    opts = opts if isinstance(opts, dict) else {}
    if not client_stream:
        return Asked(body, raw, model if isinstance(model, str) else None, False, False)
    if usage_option:
        body["stream_options"] = {**opts, "include_usage": True}
    return Asked(
        body=body,
        payload=json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(),
        model=model if isinstance(model, str) else None,
        client_stream=True,
        want_usage=opts.get("include_usage") is True and usage_option,
    )


async def read_within(request: web.Request, clock: Clock, seconds: float) -> bytes | None:
    """The client's whole body, or None when it did not come within ``seconds`` (the clock's timer
    cancels the read, so a test drives it on a manual clock). A cancellation from elsewhere (the
    client left) propagates."""
    reading = asyncio.ensure_future(request.read())
    late: list[bool] = []

    def give_up() -> None:
        late.append(True)
        reading.cancel()

    timer = clock.call_later(seconds, give_up)
    try:
        return await reading
    except asyncio.CancelledError:
        if late:
            return None
        reading.cancel()
        raise
    finally:
        timer.cancel()


def runs_detached(raw: bytes) -> bool:
    """A Responses API request with ``background: true``: the server answers at once with a
    queued response and generates detached from the connection, so there is no stream to watch
    (the proxy passes it through)."""
    if b'"background"' not in raw:
        return False
    try:
        body = json.loads(raw)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("background") is True
