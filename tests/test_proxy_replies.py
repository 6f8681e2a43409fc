"""Every reply judged: a reply that is not a well-formed answer of the API asked for is the server's
failure with its own outcome, answered with an error the client's SDK will not retry, for chat,
completions, the Responses API and the Messages API alike. From a tiny aiohttp server of this
file's own (not our code) that answers each request with the broken reply its prompt names."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from conftest import read_cut
from wedgewatch.config import WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.testing import ManualClock, eventually_async

API_PATHS = {
    "chat": "/v1/chat/completions",
    "completion": "/v1/completions",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
}


def _word(body: dict[str, Any]) -> str:
    if "messages" in body:
        content = body["messages"][-1]["content"]
        return content if isinstance(content, str) else content[0]["text"]
    return str(body.get("prompt") or body.get("input"))


def _good_event(api: str) -> bytes:
    """One well-formed event of ``api`` that carries a token."""
    if api == "chat":
        obj: dict[str, Any] = {
            "id": "c",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": "Hi"}}],
        }
        return b"data: " + json.dumps(obj).encode() + b"\n\n"
    if api == "completion":
        obj = {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": "Hi"}]}
        return b"data: " + json.dumps(obj).encode() + b"\n\n"
    if api == "responses":
        obj = {"type": "response.output_text.delta", "delta": "Hi", "output_index": 0, "content_index": 0}
        return b"event: response.output_text.delta\ndata: " + json.dumps(obj).encode() + b"\n\n"
    start = {
        "type": "message_start",
        "message": {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "content": [],
            "usage": {"input_tokens": 3},
        },
    }
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}
    return (
        b"event: message_start\ndata: " + json.dumps(start).encode() + b"\n\n"
        b"event: content_block_delta\ndata: " + json.dumps(delta).encode() + b"\n\n"
    )


def _error_event(api: str) -> bytes:
    err = {"error": {"message": "EngineCore died", "type": "BadRequestError", "code": 400}}
    if api in ("chat", "completion"):
        return b"data: " + json.dumps(err).encode() + b"\n\ndata: [DONE]\n\n"
    if api == "responses":
        obj = {"type": "error", "code": "server_error", "message": "EngineCore died"}
        return b"event: error\ndata: " + json.dumps(obj).encode() + b"\n\n"
    obj = {"type": "error", "error": {"type": "api_error", "message": "EngineCore died"}}
    return b"event: error\ndata: " + json.dumps(obj).encode() + b"\n\n"


class BrokenServer:
    """Answers each generation with the broken reply its prompt names."""

    def __init__(self) -> None:
        self.seen = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen += 1
        api = next(k for k, v in API_PATHS.items() if request.path == v)
        word = _word(body)
        if word == "HTML":  # a gateway's error page, with 200
            return web.Response(text="<html><body>502 Bad Gateway</body></html>", content_type="text/html")
        if word == "EMPTYJSON":  # JSON, but no answer in it
            return web.json_response({"id": None, "choices": []})
        if not body.get("stream"):  # one answer asked for
            if word == "UNFINISHED":  # half its JSON body, then a clean end
                return web.Response(
                    body=b'{"id": "c", "choices": [{"index": 0, "mess', content_type="application/json"
                )
            if word == "ERRORMID":  # an error object, with 200
                return web.json_response({"error": {"message": "EngineCore died", "code": 500}})
            # the others: a stream, though none was asked for
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if word == "NOTJSON":
            await resp.write(_good_event(api) + b"data: <html>oops</html>\n\ndata: [DONE]\n\n")
        elif word == "NOCHOICES":
            await resp.write(_good_event(api) + b'data: {"id": "c", "object": "x"}\n\ndata: [DONE]\n\n')
        elif word == "ONLYDONE":
            await resp.write(b"data: [DONE]\n\n")
        elif word == "ERRORMID":
            await resp.write(_good_event(api))
            await resp.write(_error_event(api))
        elif word == "UNFINISHED":
            await resp.write(_good_event(api))  # then a clean end of the body, no [DONE], no finish
        elif word == "ENDLESS":
            await resp.write(_good_event(api))
            chunk = b"data: " + b"x" * (1 << 20)
            try:
                for _ in range(64):  # 64 MiB in one line, never a newline
                    await resp.write(chunk)
            except (ConnectionError, aiohttp.ClientConnectionResetError):
                pass
        await resp.write_eof()
        return resp

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[str]:
        app = web.Application()
        for path in API_PATHS.values():
            app.router.add_post(path, self.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            yield f"http://127.0.0.1:{runner.addresses[0][1]}"
        finally:
            await runner.cleanup()


@pytest.fixture
async def proxied(tmp_path: Path) -> AsyncIterator[tuple[Proxy, Ledger]]:
    server = BrokenServer()
    async with server.serve() as url:
        with Ledger(tmp_path / "l.sqlite") as ledger:
            proxy = Proxy(url, WatchdogConfig(), ledger=ledger)
            await proxy.start()
            try:
                yield proxy, ledger
            finally:
                await proxy.stop()


def _body(api: str, word: str, stream: bool) -> dict[str, Any]:
    if api == "chat":
        return {"model": "m", "messages": [{"role": "user", "content": word}], "stream": stream}
    if api == "completion":
        return {"model": "m", "prompt": word, "stream": stream}
    if api == "responses":
        return {"model": "m", "input": word, "stream": stream}
    return {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": word}], "stream": stream}


async def _ask(proxy: Proxy, api: str, word: str, stream: bool) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.url + API_PATHS[api], json=_body(api, word, stream)) as r,
    ):
        body, cut = await read_cut(r)
        # Every reply asked for here is broken: a stream that had begun (200) ends with its error
        # event and is cut short (no last chunk, so curl exits non-zero); a plain error is whole.
        assert cut == (r.status == 200)
        return r.status, dict(r.headers), body


def _last_row(ledger: Ledger) -> dict[str, Any]:
    return dict(ledger.query("SELECT * FROM requests ORDER BY started_at DESC LIMIT 1")[0])


def _error_code(api: str, status: int, body: bytes) -> str:
    """The proxy's error code, from a plain error response or the stream's last event."""
    if status != 200:
        err = json.loads(body)["error"]
        return str(err["code"])
    # The server's error event goes on as it came, with its [DONE] after it.
    last = [ln for ln in body.split(b"\n") if ln.startswith(b"data: ") and ln != b"data: [DONE]"][-1]
    obj = json.loads(last[len(b"data: ") :])
    err = obj.get("error") if isinstance(obj.get("error"), dict) else obj
    return str(err.get("code") or err.get("type"))


FAULTS = [
    ("HTML", "reply_not_sse"),
    ("EMPTYJSON", "reply_not_api"),
    ("NOTJSON", "reply_not_json"),
    ("ONLYDONE", "reply_not_api"),
    ("ERRORMID", "stream_error_event"),
    ("UNFINISHED", "stream_unfinished"),
]
# One answer asked for (the request went upstream as sent): the whole body is judged. A stream
# where none was asked for, like an HTML page or half a JSON body, is not the API's JSON.
ONE_ANSWER = {
    "HTML": "reply_not_json",
    "EMPTYJSON": "reply_not_api",
    "NOTJSON": "reply_not_json",
    "ONLYDONE": "reply_not_json",
    "ERRORMID": "reply_not_api",
    "UNFINISHED": "reply_not_json",
}


@pytest.mark.parametrize("api", list(API_PATHS))
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "one-answer"])
@pytest.mark.parametrize(("word", "outcome"), FAULTS)
async def test_a_broken_reply_is_the_servers_failure_with_its_own_name(
    proxied: tuple[Proxy, Ledger], api: str, stream: bool, word: str, outcome: str
) -> None:
    proxy, ledger = proxied
    if not stream:
        outcome = ONE_ANSWER[word]
    status, headers, body = await _ask(proxy, api, word, stream)
    row = _last_row(ledger)
    assert row["outcome"] == outcome, json.loads(row["detail_json"]).get("error")
    assert row["http_status"] == status
    if status != 200:
        # Nothing had reached the client: a plain error status the SDK does not retry.
        assert headers.get("x-should-retry") == "false"
        assert _error_code(api, status, body) == outcome
    else:
        # A token had begun the client's stream: its last event is an error, which every SDK
        # raises on (the proxy's own, or the server's error event passed on as it came).
        assert stream
        code = _error_code(api, status, body)
        assert code == outcome or (
            outcome == "stream_error_event" and code in ("400", "server_error", "api_error")
        )


@pytest.mark.parametrize("api", ["chat", "messages"])
async def test_a_chunk_without_choices_is_not_the_apis_answer(
    proxied: tuple[Proxy, Ledger], api: str
) -> None:
    proxy, ledger = proxied
    await _ask(proxy, api, "NOCHOICES", True)
    assert _last_row(ledger)["outcome"] == "reply_not_api"


async def test_an_endless_line_is_cut_at_the_cap_and_given_back(proxied: tuple[Proxy, Ledger]) -> None:
    proxy, ledger = proxied
    status, _, body = await _ask(proxy, "chat", "ENDLESS", True)
    row = _last_row(ledger)
    assert row["outcome"] == "reply_too_large"
    assert "16777216 bytes" in json.loads(row["detail_json"])["error"]
    assert status == 200 and b"reply_too_large" in body  # the one token had begun the stream


class SlowBodyUpstream:
    """Never answers; counts the requests it was given."""

    def __init__(self) -> None:
        self.got = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.got += 1
        await asyncio.sleep(3600)  # the subject: a server that never answers (the proxy cuts it)
        raise AssertionError("unreachable")


async def _raw_client(url: str, head_and_part: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(head_and_part)
    await writer.drain()
    return reader, writer


async def _response(reader: asyncio.StreamReader) -> bytes:
    """One HTTP response: its head and its Content-Length bytes of body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = next(
        int(ln.split(b":")[1]) for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")
    )
    return head + await asyncio.wait_for(reader.readexactly(length), 10)


async def test_a_client_too_slow_to_send_its_body_is_the_clients_fault(tmp_path: Path) -> None:
    up = SlowBodyUpstream()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", up.handle)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    clock = ManualClock()
    # A stream: its first-token deadline is what the second half shows counting from the send.
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    try:
        with Ledger(tmp_path / "l.sqlite") as ledger:
            cfg = WatchdogConfig(body_timeout=30, ttft_timeout=10)
            proxy = Proxy(f"http://127.0.0.1:{runner.addresses[0][1]}", cfg, ledger=ledger, clock=clock)
            await proxy.start()
            try:
                # Half a body, then nothing: the request's body deadline, not a stall, ends it.
                reader, writer = await _raw_client(proxy.url, head + body[:10])
                await eventually_async(lambda: proxy.in_flight() == 1, what="the request in flight")
                await clock.advance(29)
                assert proxy.in_flight() == 1
                await clock.advance(2)
                answer = await _response(reader)
                writer.close()
                assert answer.startswith(b"HTTP/1.1 408") and b"client_slow_body" in answer
                assert _last_row(ledger)["outcome"] == "client_slow_body"
                assert up.got == 0  # the upstream never had the request

                # A body that comes late but within body_timeout: the ttft deadline counts from
                # when the upstream has the request, not from the request's arrival.
                reader, writer = await _raw_client(proxy.url, head + body[:10])
                await eventually_async(lambda: proxy.in_flight() == 1, what="the second request")
                await clock.advance(20)
                writer.write(body[10:])
                await writer.drain()
                await eventually_async(lambda: up.got == 1, what="the upstream to have the request")
                await clock.advance(9)
                assert proxy.in_flight() == 1  # 29 s since arrival, 9 since the upstream had it
                await clock.advance(2)
                answer = await _response(reader)
                writer.close()
                assert b"stall_ttft" in answer
                row = _last_row(ledger)
                assert row["outcome"] == "stall_ttft"
                assert json.loads(row["detail_json"])["elapsed"] == pytest.approx(10)  # not 30: from the send
            finally:
                await proxy.stop()
    finally:
        await runner.cleanup()
