"""A scripted upstream: a tiny aiohttp server (not the simulator) answering by the last user
message, for upstream behaviours the simulator does not produce. Words: ``HANG`` (no headers,
ever), ``DROP`` / ``DROP_ONCE`` (the connection closes unanswered), ``JSON`` (ignores
``stream: true``), ``CRLF`` (CRLF framing, pretty-printed JSON), ``MULTILINE`` (each event over
several ``data:`` lines), ``ERROR`` / ``ERROR_LATE`` (a token, then an error object inside the
stream, then ``[DONE]`` / the end 0.2 s later), ``ERROR0`` / ``ERROR0_400`` (a role chunk, then an
error object with code 500 / 400, then ``[DONE]`` 0.1 s later: no token), ``STALL`` (one token,
then silence), ``CUT`` (one token, then the end without ``[DONE]``), ``CUT0`` (a role chunk, then
the end), ``TIMINGS`` (llama.cpp's stream when usage is asked for: two tokens, the finish chunk,
then in a read of its own the usage-only chunk carrying ``timings``); anything else sends a role
chunk and ends. A chat request that asks for no stream gets one whole answer, as a server gives
it: "Hello there" with its usage, or for ``ERROR*`` the error with its own HTTP status, for
``STALL`` nothing (as ``HANG``), for ``CUT`` half its JSON body. Chat is served with and without ``/v1``. ``/v1/responses`` answers by its
``input``: ``CUT`` (one delta, then the end without ``response.completed``), ``ERROR`` (one
delta, then an ``error`` event), ``FAILED0`` / ``INVALID0`` (``response.failed`` before any
token, with ``server_error`` / ``invalid_prompt``), ``DONE`` (one delta, then ``[DONE]``
instead of ``response.completed``). ``/v1/messages`` answers by its last message: ``CUT`` (one
delta, then the end without ``message_stop``), ``ERROR`` (one delta, then an ``api_error``
event), ``OVERLOADED0`` (an ``overloaded_error`` event before any token).
``/v1/audio/speech`` streams an endpoint the proxy does not watch; a ``GET /v1/slow`` never
answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c-1",
        "object": "chat.completion.chunk",
        "created": 7,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def _sse(obj: Any, sep: str = "\n", pretty: bool = False) -> bytes:
    text = obj if isinstance(obj, str) else json.dumps(obj, indent=1 if pretty else None).replace("\n", " ")
    return f"data: {text}{sep}{sep}".encode()


def _error(message: str, kind: str, code: int) -> dict[str, Any]:
    """vLLM's error object, as it puts one inside a stream."""
    return {"error": {"object": "error", "message": message, "type": kind, "code": code}}


class ScriptedUpstream:
    """Answers by the last user message; remembers each request it saw (headers, body)."""

    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.raw: list[bytes] = []  # each chat request's body, as it came
        self.hung_up = asyncio.Event()  # set when a request that never answers loses its client
        self.spoken = 0  # events the /v1/audio/speech stream has written so far

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.raw.append(await request.read())
        body = await request.json()
        self.seen.append((dict(request.headers), body))
        word = body["messages"][-1]["content"]
        if word == "DROP" or (word == "DROP_ONCE" and len(self.seen) == 1):
            # The connection closes unanswered, as a server's keep-alive timer closes an idle
            # connection just as the proxy writes a request on it.
            assert request.transport is not None
            request.transport.close()
            await asyncio.sleep(3600)  # cancelled at once: the connection is gone
        if word == "DROP_ONCE":
            word = "CRLF"
        if word == "HANG":  # not even headers: a server wedged before it answers
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.hung_up.set()
                raise
        if word == "JSON":
            answer = {
                "id": "x",
                "object": "chat.completion",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}
                ],
                "usage": {"completion_tokens": 2},
            }
            return web.json_response(answer)
        # Headers a browser client and a tracer need from the server, passed on by the proxy.
        own = {"Access-Control-Allow-Origin": "*", "X-Request-Id": "upstream-7"}
        if body.get("stream") is not True:
            return await self._whole(request, word, own)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", **own})
        await resp.prepare(request)
        await resp.write(_sse(_chunk({"role": "assistant", "content": ""})))
        if word == "MULTILINE":  # each event's JSON over several data: lines, as SSE allows
            for obj in (_chunk({"content": "Hello"}), _chunk({"content": " there"}, "stop")):
                lines = json.dumps(obj, indent=1).split("\n")
                await resp.write("".join(f"data: {line}\n" for line in lines).encode() + b"\n")
            await resp.write(_sse("[DONE]"))
        elif word == "CRLF":
            for t in ("Hello", " there"):
                await resp.write(_sse(_chunk({"content": t}), sep="\r\n", pretty=True))
            await resp.write(_sse(_chunk({"content": ""}, "stop"), sep="\r\n", pretty=True))
            await resp.write(_sse({"id": "c-1", "choices": [], "usage": {"completion_tokens": 2}}, "\r\n"))
            await resp.write(_sse("[DONE]", sep="\r\n"))
        elif word == "TIMINGS":
            await resp.write(_sse(_chunk({"content": "Hello"})) + _sse(_chunk({"content": " there"})))
            await resp.write(_sse(_chunk({}, "stop")))
            await asyncio.sleep(0.05)
            usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
            timings = {"prompt_n": 3, "predicted_n": 2, "predicted_per_second": 40.0}
            await resp.write(_sse({**_chunk({}), "choices": [], "usage": usage, "timings": timings}))
            await resp.write(_sse("[DONE]"))
        elif word in ("ERROR", "ERROR_LATE"):
            await resp.write(_sse(_chunk({"content": "Hi"})))
            await resp.write(_sse(_error("engine died", "InternalServerError", 500)))
            if word == "ERROR_LATE":  # the stream ends a little after its error, without [DONE]
                await asyncio.sleep(0.2)
            else:
                await resp.write(_sse("[DONE]"))
        elif word in ("ERROR0", "ERROR0_400"):  # vLLM's way with an error found once streaming
            code = 400 if word == "ERROR0_400" else 500
            await resp.write(_sse(_error(f"refused ({code})", "BadRequestError", code)))
            await asyncio.sleep(0.1)  # [DONE] in a read of its own, as a busy server sends it
            await resp.write(_sse("[DONE]"))
        elif word == "STALL":  # one token, then silence with the connection open
            await resp.write(_sse(_chunk({"content": "Hi"})))
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.hung_up.set()
                raise
        elif word == "CUT":
            await resp.write(_sse(_chunk({"content": "Hi"})))
        elif word == "CUT0":  # a role chunk, then the end: not one token
            pass
        await resp.write_eof()
        return resp

    async def _whole(self, request: web.Request, word: str, own: dict[str, str]) -> web.StreamResponse:
        """A chat request that asked for no stream: one answer, as a server gives it."""
        if word in ("ERROR", "ERROR_LATE", "ERROR0", "ERROR0_400"):
            code = 400 if word == "ERROR0_400" else 500
            err = _error(f"refused ({code})" if word.startswith("ERROR0") else "engine died", "Error", code)
            return web.json_response(err, status=code, headers=own)
        if word == "STALL":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.hung_up.set()
                raise
        if word == "CUT":
            return web.Response(body=b'{"id": "c-1", "choices": [', content_type="application/json")
        message = {"role": "assistant", "content": "Hello there"}
        answer = {
            "id": "c-1",
            "object": "chat.completion",
            "created": 7,
            "model": "m",
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
        return web.json_response(answer, headers=own)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """The Responses API's endings the simulator does not produce."""
        body = await request.json()
        self.seen.append((dict(request.headers), body))
        word = body["input"]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def event(obj: dict[str, Any]) -> None:
            await resp.write(f"event: {obj['type']}\n".encode() + _sse(obj))

        await event({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}})
        if word in ("FAILED0", "INVALID0"):
            error = {"code": "server_error", "message": "engine died"}
            if word == "INVALID0":
                error = {"code": "invalid_prompt", "message": "the prompt was refused"}
            await event(
                {"type": "response.failed", "response": {"id": "resp_1", "status": "failed", "error": error}}
            )
        else:
            await event({"type": "response.output_text.delta", "item_id": "m", "delta": "Hi"})
        if word == "ERROR":
            await event({"type": "error", "code": "server_error", "message": "engine died", "param": None})
        if word == "DONE":  # chat's end on a Responses stream, as some gateways send it
            await resp.write(_sse("[DONE]"))
        await resp.write_eof()
        return resp

    async def messages(self, request: web.Request) -> web.StreamResponse:
        """Anthropic Messages API endings the simulator does not produce."""
        body = await request.json()
        self.seen.append((dict(request.headers), body))
        word = body["messages"][-1]["content"]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def event(obj: dict[str, Any]) -> None:
            await resp.write(f"event: {obj['type']}\n".encode() + _sse(obj))

        usage = {"input_tokens": 7, "output_tokens": 0}
        start = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "usage": usage}
        await event({"type": "message_start", "message": start})
        if word == "OVERLOADED0":  # an error before any token, as a busy server answers
            await event({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        else:
            await event(
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
            )
            await event(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}
            )
        if word == "ERROR":
            await event({"type": "error", "error": {"type": "api_error", "message": "engine died"}})
        await resp.write_eof()
        return resp

    async def speech(self, request: web.Request) -> web.StreamResponse:
        """A streaming endpoint the proxy does not watch: one event every 0.4 s (``spoken`` counts
        them as they are written); "STALL" stops after the first."""
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(4):
            if i:
                await asyncio.sleep(3600 if body["input"] == "STALL" else 0.4)
            await resp.write(_sse({"type": "response.output_text.delta", "delta": f"w{i}"}))
            self.spoken += 1
        await resp.write_eof()
        return resp

    async def slow_read(self, request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        return web.Response()

    @asynccontextmanager
    async def serve(self, host: str = "127.0.0.1") -> AsyncIterator[str]:
        """Listen on a free port; yields the root URL (``http://host:port``)."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        app.router.add_post("/chat/completions", self.handle)  # llama.cpp serves it without /v1 too
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_post("/v1/audio/speech", self.speech)
        app.router.add_get("/v1/slow", self.slow_read)
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, 0)
            await site.start()
            yield f"http://{host}:{runner.addresses[0][1]}"
        finally:
            await runner.cleanup()
