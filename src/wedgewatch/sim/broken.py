"""Replies that are not the API's answer, as inference servers and the gateways in front of them
have sent them (docs/faults.md): an HTML page with HTTP 200 in place of a stream, a ``data:`` line
that is not JSON, the server's own error event inside a begun stream (vLLM's EngineDeadError after
HTTP 200), a stream that ends cleanly without the API's end, and one line that never ends.

Each is a scenario action (``sim/scenario.py``). The HTML page answers at once; the others strike
after the fault's ``after_tokens`` tokens, so a client has already seen a well-formed start. A
non-streaming request gets the same fault in its own shape (an HTML page, a body that is not
JSON or is cut in half, vLLM's 500, a body that never ends).
"""

from __future__ import annotations

import json

from aiohttp import web

from wedgewatch.sim.chunks import DONE
from wedgewatch.sim.parse import Kind
from wedgewatch.sim.rejected import error_response

HTML_200 = "html_200"
ERROR_EVENT = "error_event"
REPLY_ACTIONS = ("not_json", "unfinished", "endless_line", ERROR_EVENT)
"""The broken replies that strike at a token boundary (the HTML page answers before any)."""

HTML_PAGE = (
    b"<html><head><title>502 Bad Gateway</title></head>"
    b"<body><center><h1>502 Bad Gateway</h1></center></body></html>\n"
)
NOT_JSON_LINE = b"data: <html><body>upstream hiccup</body></html>\n\n"
ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."
"""vLLM's message when its EngineCore died (vLLM #24495 quotes the error object whole)."""
ENDLESS_CHUNK = 1 << 20
ENDLESS_CAP = 1 << 30
"""Bytes of the endless line before the simulator gives up and ends the body: far past any
reader's cap (the proxy's ``max_frame_bytes`` is 16 MiB), short of filling a disk."""


def html_page() -> web.Response:
    """A gateway's error page, with 200: neither SSE nor the API's JSON."""
    return web.Response(body=HTML_PAGE, status=200, content_type="text/html")


def error_event(kind: Kind) -> bytes:
    """The server's own error inside a begun stream, in the API's shape: vLLM's error object then
    ``[DONE]`` on chat and completions (as vLLM sends it after an EngineCore death), an ``error``
    event on the Responses and Messages APIs."""
    if kind == "responses":
        obj = {"type": "error", "code": "server_error", "message": ENGINE_DEAD, "param": None}
        return b"event: error\ndata: " + _j(obj) + b"\n\n"
    if kind == "messages":
        # The mid-stream error event of Anthropic's streaming documentation.
        inner = {"type": "overloaded_error", "message": ENGINE_DEAD}
        return b"event: error\ndata: " + _j({"type": "error", "error": inner}) + b"\n\n"
    err = {"message": ENGINE_DEAD, "type": "Internal Server Error", "param": None, "code": 500}
    return b"data: " + _j({"error": err}) + b"\n\n" + DONE


def _j(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


async def strike(
    action: str, request: web.Request, resp: web.StreamResponse | None, kind: Kind, body: bytes
) -> web.StreamResponse:
    """Answer with broken reply ``action``: on the begun stream ``resp``, or, for a request that
    did not ask for a stream, in place of its whole ``body``."""
    if resp is None:
        return await _whole(action, request, kind, body)
    try:
        if action == "not_json":
            await resp.write(NOT_JSON_LINE + (DONE if kind in ("chat", "completion") else b""))
        elif action == ERROR_EVENT:
            await resp.write(error_event(kind))
        elif action == "endless_line":
            await _endless(resp, b"data: ")
        # "unfinished": nothing more; the body ends cleanly with no [DONE] and no finish.
        await resp.write_eof()
    except ConnectionError:
        pass  # the reader went away (a proxy cuts an endless line at its cap): nothing to end
    return resp


async def _whole(action: str, request: web.Request, kind: Kind, body: bytes) -> web.StreamResponse:
    if action == ERROR_EVENT:
        return error_response(500, ENGINE_DEAD)  # vLLM answers a non-stream request 500
    if action == "not_json":
        return web.Response(body=HTML_PAGE, status=200, content_type="application/json")
    if action == "unfinished":
        return web.Response(body=body[: len(body) // 2], status=200, content_type="application/json")
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    try:
        await _endless(resp, b'{"id": "')
        await resp.write_eof()
    except ConnectionError:
        pass
    return resp


async def _endless(resp: web.StreamResponse, head: bytes) -> None:
    """``head`` then bytes without a newline, a mebibyte at a time, until ``ENDLESS_CAP``."""
    chunk = b"x" * ENDLESS_CHUNK
    await resp.write(head)
    for _ in range(ENDLESS_CAP // ENDLESS_CHUNK):
        await resp.write(chunk)
