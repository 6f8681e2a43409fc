"""Upstream behaviours the simulator does not produce, from a tiny scripted aiohttp server (not our
code): an error object inside the stream, CRLF framing with pretty-printed JSON, a server that
ignores ``stream: true``, a stream cut without ``[DONE]``; and what the proxy sends upstream."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import openai
import pytest

from wedgewatch.base.clock import SYSTEM, Clock
from wedgewatch.base.events import Event, EventBus, UpstreamFailed
from wedgewatch.config import WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.testing import ManualClock, ScriptedUpstream, eventually_async

KEY = "sk-edge-SECRET"


Factory = Callable[..., Awaitable[tuple[Proxy, ScriptedUpstream, Ledger, list[Event]]]]


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Factory]:
    async with AsyncExitStack() as stack:

        async def make(
            clock: Clock = SYSTEM, **watchdog: float
        ) -> tuple[Proxy, ScriptedUpstream, Ledger, list[Event]]:
            up = ScriptedUpstream()
            url = await stack.enter_async_context(up.serve())
            ledger = Ledger(tmp_path / "l.sqlite")
            bus = EventBus()
            events: list[Event] = []
            bus.subscribe(events.append)
            proxy = Proxy(
                f"{url}/v1",
                WatchdogConfig(**{"ttft_timeout": 2, "stall_timeout": 2, **watchdog}),
                ledger=ledger,
                bus=bus,
                clock=clock,
            )
            await proxy.start()
            stack.push_async_callback(proxy.stop)
            return proxy, up, ledger, events

        yield make


def _client(proxy: Proxy) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proxy.url + "/a/e1/v1", api_key=KEY)


def _outcomes(ledger: Ledger) -> list[tuple[str, int | None]]:
    return [
        (r["outcome"], r["http_status"]) for r in ledger.query("SELECT * FROM requests ORDER BY started_at")
    ]


async def test_a_stream_is_asked_for_usage_and_one_answer_goes_as_sent(setup: Factory) -> None:
    proxy, up, _, _ = await setup()
    stream = await _client(proxy).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "CRLF"}],
        stream=True,
        extra_body={"stream_options": {"continuous_usage_stats": False}},
    )
    assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == "Hello there"
    headers, body = up.seen[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"continuous_usage_stats": False, "include_usage": True}
    assert headers["Authorization"] == f"Bearer {KEY}"
    assert headers["Accept-Encoding"] == "identity"
    # One answer asked for: the client's bytes go upstream as they are, key and all.
    sent = b'{"model": "m",  "messages": [{"role": "user", "content": "CRLF"}], "stream_options": {}}'
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            proxy.url + "/v1/chat/completions", data=sent, headers={"Authorization": f"Bearer {KEY}"}
        ) as r,
    ):
        assert r.status == 200 and (await r.json())["choices"][0]["message"]["content"] == "Hello there"
    assert up.raw[1] == sent
    assert up.seen[1][0]["Authorization"] == f"Bearer {KEY}"


async def test_a_generation_without_v1_is_watched_too(setup: Factory) -> None:
    # llama.cpp answers /chat/completions as well as /v1/chat/completions; a client given the
    # server's root as its base URL uses the first. It is a generation: watched and recorded.
    proxy, up, ledger, _ = await setup(stall_timeout=0.5)
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)
    res = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "CRLF"}])
    assert res.choices[0].message.content == "Hello there"
    with pytest.raises(openai.APIError, match="no token for"):
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "STALL"}], stream=True
        )
        async for _ in stream:
            pass
    assert [o for o, _ in _outcomes(ledger)] == ["ok", "stall_midstream"]
    assert ledger.query("SELECT DISTINCT path FROM requests")[0][0] == "/chat/completions"
    assert [body.get("stream") for _, body in up.seen] == [None, True]  # as the client asked


async def test_a_gzip_request_body_goes_upstream_decoded_and_says_so(setup: Factory) -> None:
    proxy, up, ledger, _ = await setup()
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "CRLF"}]}).encode()
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/v1/chat/completions", data=gzip.compress(body), headers=headers) as r:
            assert r.status == 200, await r.text()
            answer = await r.json()
        passed = gzip.compress(json.dumps({"input": "x"}).encode())
        async with s.post(proxy.url + "/v1/audio/speech", data=passed, headers=headers) as r:  # unwatched
            assert r.status == 200 and (await r.text()).count("output_text.delta") == 4
    assert answer["choices"][0]["message"]["content"] == "Hello there"
    sent, got = up.seen[0]
    assert "Content-Encoding" not in sent and got["messages"][0]["content"] == "CRLF"
    assert [o for o, _ in _outcomes(ledger)] == ["ok"]


async def test_the_servers_own_headers_reach_the_client_streaming_or_not(setup: Factory) -> None:
    proxy, _, _, _ = await setup()
    body = {"model": "m", "messages": [{"role": "user", "content": "CRLF"}]}
    async with aiohttp.ClientSession() as s:
        for stream in (True, False):
            async with s.post(proxy.url + "/v1/chat/completions", json={**body, "stream": stream}) as r:
                await r.read()
                assert r.status == 200
                assert r.headers["Access-Control-Allow-Origin"] == "*", stream
                assert r.headers["X-Request-Id"] == "upstream-7", stream
                assert r.headers["x-wedgewatch-request-id"], stream  # the proxy's own, beside them
                want = "text/event-stream" if stream else "application/json"
                assert r.headers["Content-Type"].startswith(want), stream


# CRLF framing with pretty-printed JSON on one line; MULTILINE: each event over several data:
# lines, as the SSE spec allows (the proxy once passed the continuation lines on bare).
@pytest.mark.parametrize("framing", ["CRLF", "MULTILINE"])
async def test_odd_but_legal_framings_are_read_and_passed_on(setup: Factory, framing: str) -> None:
    proxy, _, ledger, _ = await setup()
    stream = await _client(proxy).chat.completions.create(
        model="m", messages=[{"role": "user", "content": framing}], stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "Hello there"
    (row,) = ledger.query("SELECT * FROM requests")
    assert row["outcome"] == "ok" and row["tokens_out"] == 2
    assert row["completion_tokens"] == (2 if framing == "CRLF" else None)  # only CRLF sends usage


async def test_an_error_inside_the_stream_is_an_upstream_error(setup: Factory) -> None:
    proxy, _, ledger, events = await setup()
    client = _client(proxy)
    # Streaming: the error line is forwarded (or, if it came in the same read as everything
    # before it, answered as an HTTP 500); either way the SDK raises with the upstream's message.
    with pytest.raises(openai.APIError, match="engine died"):
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "ERROR"}], stream=True
        )
        async for _ in stream:
            pass
    # One answer: the server's own 500 (vLLM's for an engine that died), the server's failure.
    with pytest.raises(openai.InternalServerError, match="engine died") as info:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "ERROR"}])
    assert info.value.response.headers["x-should-retry"] == "false"
    assert info.value.body["code"] == "upstream_http_500"  # type: ignore[index]
    assert [o for o, _ in _outcomes(ledger)] == ["stream_error_event", "upstream_http_500"]
    failed = [e.outcome for e in events if isinstance(e, UpstreamFailed)]
    assert failed == ["stream_error_event", "upstream_http_500"]


@pytest.mark.parametrize("stream", [True, False])
async def test_an_error_before_any_token_is_answered_with_its_own_http_status(
    setup: Factory, stream: bool
) -> None:
    # Nothing has gone to a streaming client yet, so it gets what a non-streaming one gets: the
    # error's own status (a 400 is the client's, as the server said it; a 500 is the proxy's error
    # object with x-should-retry: false), never a 200 whose stream then fails.
    proxy, upstream, ledger, _ = await setup()
    client = _client(proxy)
    with pytest.raises(openai.BadRequestError, match="refused \\(400\\)") as bad:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "ERROR0_400"}], stream=stream
        )
    assert bad.value.status_code == 400
    with pytest.raises(openai.InternalServerError, match="refused \\(500\\)") as failed:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "ERROR0"}], stream=stream
        )
    assert failed.value.status_code == 500 and failed.value.response.headers["x-should-retry"] == "false"
    # One answer asked for: the server's own status said it (upstream_http_500 for the 500).
    second = "stream_error_event" if stream else "upstream_http_500"
    assert [o for o, _ in _outcomes(ledger)] == ["client_error", second]
    assert len(upstream.seen) == 2  # one request each: the SDK did not retry


async def test_an_error_the_client_hangs_up_on_is_still_the_upstreams_error(setup: Factory) -> None:
    # The SDK raises on the error line and closes at once, before the stream's end reaches the
    # proxy: the row is the upstream's error, not the client's disconnect.
    proxy, _, ledger, _ = await setup()
    client = _client(proxy)
    for _ in range(3):
        with pytest.raises(openai.APIError, match="engine died"):
            stream = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "ERROR_LATE"}], stream=True
            )
            async with stream:
                async for _ in stream:
                    pass
    await eventually_async(lambda: len(_outcomes(ledger)) == 3, timeout=10)
    assert [o for o, _ in _outcomes(ledger)] == ["stream_error_event"] * 3


async def test_a_stream_cut_before_done_is_the_upstreams_failure(setup: Factory) -> None:
    proxy, _, ledger, _ = await setup()
    stream = await _client(proxy).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "CUT"}], stream=True
    )
    with pytest.raises(openai.APIError) as info:
        async for _ in stream:
            pass
    assert info.value.body["code"] == "stream_unfinished"  # type: ignore[index]
    # cut before any token: nothing had been sent, so the client gets a plain 502
    with pytest.raises(openai.APIStatusError) as info2:
        await _client(proxy).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "CUT0"}], stream=True
        )
    assert info2.value.status_code == 502 and info2.value.response.headers["x-should-retry"] == "false"
    assert _outcomes(ledger) == [("stream_unfinished", 200), ("stream_unfinished", 502)]


async def test_an_upstream_that_ignores_stream_true_is_passed_through(setup: Factory) -> None:
    proxy, _, ledger, _ = await setup()
    async with aiohttp.ClientSession() as s:
        body = {"model": "m", "messages": [{"role": "user", "content": "JSON"}], "stream": True}
        async with s.post(proxy.url + "/v1/chat/completions", json=body) as r:
            assert r.status == 200 and (await r.json())["id"] == "x"
        async with s.post(proxy.url + "/v1/chat/completions", data=b"{not json") as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "invalid_json"
        # A stream that is no boolean: the server would refuse it, but it never sees the value.
        async with s.post(proxy.url + "/v1/chat/completions", json={**body, "stream": "yes"}) as r:
            error = (await r.json())["error"]
            assert r.status == 400 and error["code"] == "invalid_stream" and '"yes"' in error["message"]
        async with s.post(proxy.url + "/a/bad id/v1/chat/completions", json=body) as r:
            assert r.status == 404
    [first] = ledger.query("SELECT detail_json FROM requests ORDER BY started_at LIMIT 1")
    assert json.loads(first["detail_json"])["upstream_streamed"] is False
    rows = ledger.query("SELECT outcome, completion_tokens, http_status FROM requests ORDER BY started_at")
    assert [tuple(r) for r in rows] == [
        ("ok", 2, 200),
        ("client_error", None, 400),
        ("client_error", None, 400),
    ]


async def test_a_server_that_never_sends_headers_is_a_stall_ttft_and_is_hung_up_on(setup: Factory) -> None:
    clock = ManualClock()
    proxy, up, ledger, events = await setup(clock)
    call = asyncio.ensure_future(
        _client(proxy).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "HANG"}], stream=True
        )
    )
    await eventually_async(lambda: len(up.seen) == 1, what="the request upstream")
    await clock.advance(1.9)  # ttft_timeout is 2 s on the proxy's clock
    assert not call.done() and proxy.in_flight() == 1
    await clock.advance(0.2)
    with pytest.raises(openai.InternalServerError) as info:
        await asyncio.wait_for(call, 10)
    assert info.value.body["code"] == "stall_ttft"  # type: ignore[index]
    await asyncio.wait_for(up.hung_up.wait(), 2.0)  # the upstream connection was closed
    assert len(up.seen) == 1  # and the SDK did not retry
    assert _outcomes(ledger) == [("stall_ttft", 503)]
    assert [e.kind for e in events] == ["stall"]


async def test_a_connection_closed_unanswered_is_tried_once_more(setup: Factory) -> None:
    proxy, up, ledger, _ = await setup()
    res = await _client(proxy).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "DROP_ONCE"}]
    )
    assert res.choices[0].message.content == "Hello there"
    assert len(up.seen) == 2
    assert _outcomes(ledger) == [("ok", 200)]


async def test_a_server_that_always_closes_unanswered_is_tried_twice_then_a_502(setup: Factory) -> None:
    proxy, up, ledger, _ = await setup()
    with pytest.raises(openai.APIStatusError) as info:
        await _client(proxy).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "DROP"}]
        )
    assert info.value.status_code == 502
    assert "ServerDisconnectedError" in str(info.value)
    assert len(up.seen) == 2
    assert _outcomes(ledger) == [("connection", 502)]


async def test_an_unwatched_endpoint_streams_through_past_the_passthrough_deadline(setup: Factory) -> None:
    # The upstream writes an event every 0.4 s: 1.2 s in all, past the 0.5 s deadline of a read.
    proxy, up, _, _ = await setup(passthrough_timeout=0.5)
    arrived: list[tuple[int, bytes]] = []  # how many events the upstream had written, what came
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.url + "/v1/audio/speech", json={"model": "m", "input": "go", "stream": True}) as r,
    ):
        assert r.status == 200
        async for chunk in r.content.iter_any():
            arrived.append((up.spoken, chunk))
    body = b"".join(c for _, c in arrived)
    assert [json.loads(line[6:])["delta"] for line in body.split(b"\n\n") if line] == ["w0", "w1", "w2", "w3"]
    # Relayed as it came, not buffered: the first event was out before the last was written.
    assert arrived[0][0] < 4


async def test_a_read_keeps_the_short_deadline_and_a_stalled_post_is_cut_at_total_timeout(
    setup: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    # Both deadlines are aiohttp's own, on real time: which one cut is read from what was said.
    caplog.set_level(logging.INFO, logger="wedgewatch.proxy.passthrough")
    proxy, _, _, _ = await setup(passthrough_timeout=0.3, total_timeout=1.5)
    async with aiohttp.ClientSession() as s:
        async with s.get(proxy.url + "/v1/slow") as r:
            assert r.status == 504
            error = (await r.json())["error"]
            assert error["code"] == "timeout" and "GET /v1/slow within 0.3 s" in error["message"]
        with pytest.raises(aiohttp.ClientPayloadError):
            async with s.post(proxy.url + "/v1/audio/speech", json={"model": "m", "input": "STALL"}) as r:
                assert r.status == 200
                await r.read()
    assert "did not finish POST /v1/audio/speech within 1.5 s" in caplog.text  # not the 0.3 s of a read


async def test_the_servers_own_fields_on_the_usage_chunk_reach_a_client_that_did_not_ask_for_usage(
    setup: Factory,
) -> None:
    # llama.cpp puts its `timings` on the finish chunk, or on the usage-only chunk when usage is
    # asked for, which the proxy always asks for. A client that did not ask must still get them
    # on its finish chunk (and no usage-only chunk); one that asked gets that chunk as it was sent.
    proxy, _, ledger, _ = await setup()
    client = _client(proxy)
    hi = [{"role": "user", "content": "TIMINGS"}]
    plain = [c async for c in await client.chat.completions.create(model="m", messages=hi, stream=True)]
    assert all(c.choices for c in plain) and all(c.usage is None for c in plain)
    assert "".join(c.choices[0].delta.content or "" for c in plain) == "Hello there"
    last = plain[-1]
    assert last.choices[0].finish_reason == "stop"
    assert (last.model_extra or {})["timings"]["predicted_n"] == 2
    assert not any((c.model_extra or {}).get("timings") for c in plain[:-1])
    asked = [
        c
        async for c in await client.chat.completions.create(
            model="m", messages=hi, stream=True, stream_options={"include_usage": True}
        )
    ]
    assert asked[-1].choices == [] and asked[-1].usage is not None
    assert (asked[-1].model_extra or {})["timings"]["predicted_n"] == 2
    assert "timings" not in (asked[-2].model_extra or {})  # the finish chunk as the server sent it
    assert [o for o, _ in _outcomes(ledger)] == ["ok", "ok"]
