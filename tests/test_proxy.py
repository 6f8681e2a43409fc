"""The watchdog proxy end to end: the simulator as upstream (a real subprocess), the proxy in this
process on a real socket, the OpenAI SDK at its defaults (max_retries=2) as the client, and a real
SQLite ledger. One simulator serves the module; every fault is keyed by a word in the prompt, and
each test reads /sim/stats before and after to count what the simulator saw.

The simulator sends ``: ping`` comments every 0.2 s on open streams, stalls included, so every stall
test also shows that pings do not keep a request alive.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from conftest import RunningServer, launch
from wedgewatch.base.clock import SYSTEM, Clock
from wedgewatch.base.events import Event, EventBus
from wedgewatch.config import WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.testing import ChangingLives, ManualClock, eventually_async
from wedgewatch.wire.promtext import parse as parse_prom

KEY = "sk-wedgewatch-test-SECRET-4242"
MODEL = "sim-model"
# The deadline tests run the proxy on a ManualClock: a deadline fires when the test moves the clock
# past it, never before, and no wall-clock margin is asserted (a busy machine once took 3.85 s where
# one allowed 3.62). The real-time latency is `wedgewatch bench detection`'s to measure.

SCENARIO = """
name = "proxy-tests"
[server]
tokens_per_s = 50.0
max_num_seqs = 64

[[fault]]
when.contains = "STALL-TTFT"
action = "stall_ttft"

[[fault]]
when.contains = "STALL-MID"
action = "stall_after"
after_tokens = 3

[[fault]]
when.contains = "TRICKLE"
action = "trickle"
rate = 0.5

[[fault]]
when.contains = "HTTP-503"
action = "http_error"
status = 503

[[fault]]
when.contains = "DROP"
action = "drop"
after_tokens = 3
"""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "List files",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "depth": {"type": "integer"}},
            },
        },
    }
]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    d = tmp_path_factory.mktemp("sim")
    scenario = d / "faults.toml"
    scenario.write_text(SCENARIO)
    argv = [sys.executable, "-m", "wedgewatch", "sim", "--port", "0", "--scenario", str(scenario)]
    server = launch([*argv, "--sse-ping-interval", "0.2"], d / "sim.log")
    yield server
    server.stop()


class Harness:
    """One proxy in front of the module's simulator, with its ledger, events and an SDK client."""

    def __init__(self, sim: RunningServer, proxy: Proxy, ledger: Ledger, events: list[Event]) -> None:
        self.sim = sim
        self.proxy = proxy
        self.ledger = ledger
        self.events = events

    def client(self, attempt: str | None = "att-1") -> openai.AsyncOpenAI:
        base = self.proxy.url + (f"/a/{attempt}/v1" if attempt else "/v1")
        return openai.AsyncOpenAI(base_url=base, api_key=KEY)  # default max_retries=2

    async def stats(self) -> dict[str, Any]:
        async with aiohttp.ClientSession() as s, s.get(self.sim.url + "/sim/stats") as r:
            data: dict[str, Any] = await r.json()
            return data

    async def wait_stats(self, before: dict[str, Any], key: str, delta: int) -> int:
        """Wait until /sim/stats' ``key`` grew by ``delta``; return the growth seen (maybe more)."""

        async def grown() -> int:
            n = int((await self.stats())[key] - before[key])
            return n if n >= delta else 0

        return await eventually_async(grown, what=f"/sim/stats {key} grew by {delta}")

    async def tokens_in_flight(self, n: int) -> None:
        """Wait until the one request in flight has had ``n`` tokens (or more) from the upstream."""
        await eventually_async(
            lambda: [r["tokens_out"] >= n for r in self.proxy.status()["in_flight"]] == [True],
            what=f"{n} tokens in flight",
        )

    def rows(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.ledger.query("SELECT * FROM requests ORDER BY started_at")]


Factory = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def harness(sim: RunningServer, tmp_path: Path) -> AsyncIterator[Factory]:
    made: list[Harness] = []

    async def make(
        watchdog: WatchdogConfig | None = None, upstream: Any = None, clock: Clock = SYSTEM
    ) -> Harness:
        ledger = Ledger(tmp_path / f"ledger{len(made)}.sqlite")
        bus = EventBus()
        events: list[Event] = []
        bus.subscribe(events.append)
        # Without a config: deadlines no healthy gap meets on a busy machine (a real 1 s did); a
        # test that wants a deadline to run out gives its own and moves a ManualClock past it.
        cfg = watchdog or WatchdogConfig(ttft_timeout=60, stall_timeout=60, min_rate=0, total_timeout=90)
        proxy = Proxy(upstream or sim.url, cfg, ledger=ledger, bus=bus, clock=clock)
        await proxy.start()
        h = Harness(sim, proxy, ledger, events)
        made.append(h)
        return h

    yield make
    for h in made:
        await h.proxy.stop()
        h.ledger.close()


def _msg(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


async def _consume(
    client: openai.AsyncOpenAI, prompt: str, stream: bool, max_tokens: int, into: list[str] | None = None
) -> list[str]:
    """Run one request; return the text of each token-bearing chunk the client got (a stream's
    are also added to ``into`` as they come, so a caller sees them if the request fails)."""
    got: list[str] = [] if into is None else into
    if stream:
        s = await client.chat.completions.create(
            model=MODEL, messages=_msg(prompt), max_tokens=max_tokens, stream=True
        )
        async for chunk in s:
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
    else:
        await client.chat.completions.create(model=MODEL, messages=_msg(prompt), max_tokens=max_tokens)
    return got


# For each kind: the deadline that must run out, and where its clock starts: at the request
# (ttft, total), at the last token (stall_midstream), or at the first token (trickle: the simulator
# sends 0.5 tokens/s, below min_rate 2 over 1.5 s, while stall_timeout 5 s never runs out).
STALLS = [
    ("stall_ttft", "STALL-TTFT", {"ttft_timeout": 1.0}, "ttft_timeout"),
    ("stall_midstream", "STALL-MID", {"stall_timeout": 1.0}, "stall_timeout"),
    ("trickle", "TRICKLE", {"stall_timeout": 5.0, "min_rate": 2.0, "rate_window": 1.5}, "rate_window"),
    ("total_timeout", "a long healthy answer", {"stall_timeout": 5.0, "total_timeout": 1.5}, "total_timeout"),
]


@pytest.mark.parametrize(("kind", "prompt", "limits", "field"), STALLS, ids=[s[0] for s in STALLS])
async def test_each_stall_is_raised_at_once_without_retry_and_aborted_upstream(
    harness: Factory, kind: str, prompt: str, limits: dict[str, float], field: str
) -> None:
    stream = True  # a non-streaming request has only total_timeout: the test after this one
    # ttft_timeout is long unless it is the deadline under test: once tokens flow, the shorter
    # stall_timeout must take over from it (the first token re-arms the request's timer).
    cfg = WatchdogConfig(**{"ttft_timeout": 10.0, "stall_timeout": 1.0, "min_rate": 0.0, **limits})
    window = getattr(cfg, field)
    clock = ManualClock()
    h = await harness(cfg, clock=clock)
    before = await h.stats()
    got: list[str] = []
    call = asyncio.create_task(_consume(h.client(), prompt, stream, max_tokens=2000, into=got))
    await h.wait_stats(before, "received", 1)
    if field == "stall_timeout":  # its clock starts at the last token: the third, then silence
        await h.tokens_in_flight(3)
    elif field == "rate_window":  # its clock starts at the first token
        await h.tokens_in_flight(1)
    elif field == "total_timeout":
        # Its clock starts at the request, but a begun stream is what this case answers: on a
        # loaded machine the first token can come after the clock has been moved past it.
        await h.tokens_in_flight(1)
    # No clock time has passed since the request (and its tokens) came: just short of the window,
    # nothing has fired; just past it, the client hears of the stall with no more time passing.
    await clock.advance(window - 0.1)
    assert not call.done() and h.proxy.in_flight() == 1 and h.rows() == []
    await clock.advance(0.2)
    with pytest.raises(openai.APIError) as info:
        await asyncio.wait_for(call, 10)
    err = info.value
    assert isinstance(err.body, dict) and err.body["code"] == kind, err.body
    assert err.body["type"] == "upstream_stalled"
    if isinstance(err, openai.APIStatusError):  # answered before the stream began
        assert err.status_code == 503
        assert err.response.headers["x-should-retry"] == "false"
    else:
        assert stream and kind != "stall_ttft", "only a begun stream ends with an in-stream error"
    rows = h.rows()
    assert [r["outcome"] for r in rows] == [kind]
    row = rows[0]
    # the deadline ran out exactly at its window on the proxy's clock
    detail = json.loads(row["detail_json"])
    waited = {
        "ttft_timeout": detail["elapsed"],
        "total_timeout": detail["elapsed"],
        "stall_timeout": detail["since_last_token"],
        "rate_window": detail["elapsed"] - (row["ttft"] or 0.0),
    }[field]
    assert waited == pytest.approx(window, abs=0.002)  # detail numbers are rounded to ms
    if stream and field == "stall_timeout":
        assert len(got) == 3, got  # the client had the three tokens before the error
    # exactly one request reached the simulator (no SDK retry), and it was aborted there
    assert await h.wait_stats(before, "aborted", 1) == 1
    after = await h.stats()
    assert after["received"] - before["received"] == 1
    assert row["attempt_id"] == "att-1" and row["client_stream"] == int(stream)
    assert row["http_status"] == (200 if stream and kind != "stall_ttft" else 503)
    if kind == "stall_ttft":  # the role chunk came (and pings), but no token
        assert row["tokens_out"] == 0 and row["ttft"] is None
    # the supervisor's subscription heard it, with the attempt
    stalls = [e for e in h.events if e.kind == "stall"]
    assert len(stalls) == 1 and stalls[0].attempt_id == "att-1"
    assert stalls[0].outcome == kind and stalls[0].detail["request_id"] == row["request_id"]
    assert h.proxy.in_flight() == 0


@pytest.mark.parametrize("prompt", ["STALL-TTFT", "STALL-MID", "TRICKLE", "a long healthy answer"])
async def test_a_non_streaming_request_is_ended_by_total_timeout_alone(harness: Factory, prompt: str) -> None:
    """One whole answer has no tokens to watch: whatever the server does before it comes (no
    token, three then silence, a trickle, a long healthy answer), the first-token, mid-stream and
    trickle deadlines never fire, and ``total_timeout`` ends it exactly at its window, with the
    503 the SDK does not retry and the upstream aborted."""
    cfg = WatchdogConfig(
        ttft_timeout=1.0, stall_timeout=1.0, min_rate=2.0, rate_window=1.5, total_timeout=5.0
    )
    clock = ManualClock()
    h = await harness(cfg, clock=clock)
    before = await h.stats()
    call = asyncio.create_task(_consume(h.client(), prompt, False, max_tokens=2000))
    await h.wait_stats(before, "received", 1)
    await clock.advance(4.9)
    assert not call.done() and h.proxy.in_flight() == 1 and h.rows() == []
    await clock.advance(0.2)
    with pytest.raises(openai.APIStatusError) as info:
        await asyncio.wait_for(call, 10)
    err = info.value
    assert err.status_code == 503 and err.response.headers["x-should-retry"] == "false"
    assert isinstance(err.body, dict) and err.body["code"] == "total_timeout", err.body
    [row] = h.rows()
    assert row["outcome"] == "total_timeout" and row["client_stream"] == 0
    assert json.loads(row["detail_json"])["elapsed"] == pytest.approx(5.0, abs=0.002)
    assert await h.wait_stats(before, "aborted", 1) == 1
    assert (await h.stats())["received"] - before["received"] == 1


async def test_pings_during_a_stall_are_forwarded_but_do_not_keep_it_alive(harness: Factory) -> None:
    """Raw bytes: after 3 tokens the simulator only sends ': ping' (one per 0.2 real s); the proxy
    passes the pings on to the begun stream, yet they do not move the stall deadline: on the
    proxy's clock the stream ends ``stall_timeout`` after the last token, with a final error line."""
    clock = ManualClock()
    h = await harness(WatchdogConfig(ttft_timeout=1, stall_timeout=1.0, min_rate=0), clock=clock)
    body = {"model": MODEL, "messages": _msg("STALL-MID"), "stream": True, "max_tokens": 50}
    raw = bytearray()
    async with aiohttp.ClientSession() as s, s.post(h.proxy.url + "/v1/chat/completions", json=body) as r:
        assert r.status == 200

        async def read() -> None:
            with pytest.raises(aiohttp.ClientPayloadError):  # the failed stream is cut short
                async for chunk in r.content.iter_any():
                    raw.extend(chunk)

        reader = asyncio.create_task(read())
        await h.tokens_in_flight(3)
        await eventually_async(lambda: b": ping" in raw, what="a ping forwarded after the tokens")
        await clock.advance(0.6)
        pings = raw.count(b": ping")
        await eventually_async(lambda: raw.count(b": ping") >= pings + 2, what="two more pings")
        # Had a ping counted as progress, the deadline would now be 1.6 s or later.
        assert not reader.done() and h.rows() == []
        await clock.advance(0.6)
        await asyncio.wait_for(reader, 10)
    assert raw.count(b": ping") >= 3
    lines = [ln for ln in bytes(raw).split(b"\n\n") if ln.startswith(b"data: ")]
    last = json.loads(lines[-1][6:])
    assert last["error"]["code"] == "stall_midstream"
    assert b"[DONE]" not in raw
    row = h.rows()[0]
    assert json.loads(row["detail_json"])["since_last_token"] == 1.0  # the last token's, not a ping's
    assert row["attempt_id"] is None  # plain /v1 is untagged


async def test_healthy_concurrent_streams_are_never_stalled(harness: Factory) -> None:
    # Every deadline on, none that a healthy stream meets however busy the machine (each one firing
    # is test_each_stall_is_raised_at_once_...'s, on a manual clock; false alarms at the defaults
    # are make bench's to measure): the subject is eight concurrent streams watched and counted.
    cfg = WatchdogConfig(ttft_timeout=60, stall_timeout=60, min_rate=0.5, rate_window=30, total_timeout=120)
    h = await harness(cfg)
    client = h.client("healthy")
    results = await asyncio.gather(
        *(_consume(client, f"story {i}", stream=i % 2 == 0, max_tokens=60) for i in range(8))
    )
    assert [len(t) for t in results[::2]] == [60] * 4
    rows = h.rows()
    assert len(rows) == 8 and {r["outcome"] for r in rows} == {"ok"}
    assert all(r["completion_tokens"] == 60 and r["tokens_out"] == 60 for r in rows)
    # A stream's gaps are measured; a whole answer has none to measure (no first token either).
    assert all(r["max_gap"] > 0 for r in rows if r["client_stream"])
    assert all(r["max_gap"] is None and r["ttft"] is None for r in rows if not r["client_stream"])
    assert [e.kind for e in h.events].count("request_ok") == 8


async def _direct(sim: RunningServer, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.post(sim.url + path, json=body) as r:
        return r.status, await r.read()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": _msg("Tell me a story."), "max_tokens": 40}),
        ("/v1/chat/completions", {"messages": _msg("Please call list_files now."), "tools": TOOLS}),
        ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 25}),
    ],
    ids=["text", "tool_call", "completion"],
)
async def test_a_non_streaming_answer_equals_the_upstreams_own(
    harness: Factory, sim: RunningServer, path: str, body: dict[str, Any]
) -> None:
    h = await harness()
    body = {"model": MODEL, **body}
    status, raw = await _direct(sim, path, body)
    assert status == 200
    own = json.loads(raw)
    async with aiohttp.ClientSession() as s, s.post(h.proxy.url + path, json=body) as r:
        assert r.status == 200
        mine = await r.json()
    # The server's own answer, every field: only the ids and the time it was made differ.
    assert isinstance(mine["id"], str) and isinstance(mine["created"], int)
    strip = {"id": None, "created": None}
    assert {**mine, **strip} == {**own, **strip}
    got, want = mine["choices"][0], own["choices"][0]
    if path == "/v1/completions":
        assert len(want["text"]) > 20
    if "tools" in body:
        call = got["message"]["tool_calls"][0]
        assert call["function"]["name"] == "list_files"
        assert json.loads(call["function"]["arguments"]) == {"path": "filler", "depth": 1}
        assert got["message"]["content"] is None and got["finish_reason"] == "tool_calls"
    # and the SDK reads it like any answer
    if path == "/v1/chat/completions" and "tools" not in body:
        res = await h.client().chat.completions.create(model=MODEL, messages=body["messages"], max_tokens=40)
        assert res.choices[0].message.content == want["message"]["content"]
        assert res.usage is not None and res.usage.completion_tokens == 40
    row = h.rows()[0]
    assert row["outcome"] == "ok" and row["client_stream"] == 0
    assert row["completion_tokens"] == own["usage"]["completion_tokens"]


async def test_a_stream_carries_usage_only_when_the_client_asks(harness: Factory) -> None:
    h = await harness()
    client = h.client()
    plain = await client.chat.completions.create(model=MODEL, messages=_msg("hi"), max_tokens=5, stream=True)
    chunks = [c async for c in plain]
    assert all(c.choices for c in chunks) and all(c.usage is None for c in chunks)
    asked = await client.chat.completions.create(
        model=MODEL, messages=_msg("hi"), max_tokens=5, stream=True, stream_options={"include_usage": True}
    )
    chunks = [c async for c in asked]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 5
    assert [r["completion_tokens"] for r in h.rows()] == [5, 5]  # recorded either way


async def test_client_errors_pass_through_unchanged(harness: Factory, sim: RunningServer) -> None:
    h = await harness()
    body = {"model": "no-such-model", "messages": _msg("hi")}
    status, raw = await _direct(sim, "/v1/chat/completions", body)
    assert 400 <= status < 500
    async with (
        aiohttp.ClientSession() as s,
        s.post(h.proxy.url + "/a/x1/v1/chat/completions", json=body) as r,
    ):
        assert r.status == status
        assert await r.read() == raw
        assert "x-should-retry" not in r.headers
    before = await h.stats()
    with pytest.raises(openai.APIStatusError) as info:
        await h.client().chat.completions.create(model=MODEL, messages=_msg("hi"), max_tokens=0)
    assert info.value.status_code == 400
    assert (await h.stats())["rejected"] - before["rejected"] == 1
    assert [(r["outcome"], r["http_status"]) for r in h.rows()] == [
        ("client_error", status),
        ("client_error", 400),
    ]
    assert not [e for e in h.events if e.kind in ("stall", "upstream_error")]


async def test_upstream_5xx_and_a_dropped_connection_are_infra_errors_the_sdk_does_not_retry(
    harness: Factory,
) -> None:
    h = await harness()
    client = h.client()
    before = await h.stats()
    with pytest.raises(openai.InternalServerError) as info:
        await client.chat.completions.create(model=MODEL, messages=_msg("HTTP-503"))
    assert info.value.status_code == 503 and info.value.response.headers["x-should-retry"] == "false"
    assert info.value.body["code"] == "upstream_http_503"  # type: ignore[index]
    assert (await h.stats())["received"] - before["received"] == 1
    with pytest.raises(openai.APIError) as info2:
        await _consume(client, "DROP", stream=True, max_tokens=50)
    assert info2.value.body["code"] == "connection"  # type: ignore[index]
    with pytest.raises(openai.APIStatusError) as info3:
        await client.chat.completions.create(model=MODEL, messages=_msg("DROP"), max_tokens=50)
    assert info3.value.status_code == 502
    # The non-streaming request's connection closed with no byte answered, which the proxy takes
    # for a kept-alive connection the server closed as it wrote (upstream.post): sent once more.
    after = await h.stats()
    assert after["received"] - before["received"] == 4 and after["dropped"] - before["dropped"] == 3
    assert [r["outcome"] for r in h.rows()] == ["upstream_http_503", "connection", "connection"]
    errors = [e for e in h.events if e.kind == "upstream_error"]
    assert [e.outcome for e in errors] == ["upstream_http_503", "connection", "connection"]
    assert errors[0].detail["status"] == 503 and errors[0].attempt_id == "att-1"


async def test_an_unreachable_upstream_is_a_connection_error(harness: Factory, unused_tcp_port: int) -> None:
    h = await harness(upstream=f"http://127.0.0.1:{unused_tcp_port}")
    with pytest.raises(openai.APIStatusError) as info:
        await h.client().chat.completions.create(model=MODEL, messages=_msg("hi"))
    assert info.value.status_code == 502 and info.value.response.headers["x-should-retry"] == "false"
    assert h.rows()[0]["outcome"] == "connection"
    async with aiohttp.ClientSession() as s, s.get(h.proxy.url + "/v1/models") as r:
        assert r.status == 502 and r.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nostream"])
async def test_a_client_that_leaves_aborts_the_upstream_request(harness: Factory, stream: bool) -> None:
    # On a manual clock that never moves, no deadline can end the request: only the client's leaving.
    h = await harness(WatchdogConfig(ttft_timeout=5, stall_timeout=5, min_rate=0), clock=ManualClock())
    before = await h.stats()
    body = {"model": MODEL, "messages": _msg("a very long answer"), "max_tokens": 5000, "stream": stream}
    async with aiohttp.ClientSession() as s:
        if stream:
            async with s.post(h.proxy.url + "/a/gone/v1/chat/completions", json=body) as r:
                await r.content.readany()
                await r.content.readany()
                r.close()  # hang up mid-stream
        else:
            # nothing comes back before the whole answer: give up while it is being generated, as a
            # client's timeout does
            post = asyncio.ensure_future(s.post(h.proxy.url + "/a/gone/v1/chat/completions", json=body))
            await h.wait_stats(before, "received", 1)
            post.cancel()
            with pytest.raises(asyncio.CancelledError):
                await post
    assert await h.wait_stats(before, "aborted", 1) == 1
    (row,) = await eventually_async(h.rows, what="the request's row")
    assert row["outcome"] == "client_disconnect" and row["attempt_id"] == "gone"
    assert row["duration"] == 0.0  # ended with no time passing on the proxy's clock
    assert h.proxy.in_flight() == 0


async def test_the_api_key_is_never_written_or_logged(
    harness: Factory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = ManualClock()  # the stalled request's deadline runs out when the test moves it, never before
    h = await harness(clock=clock)
    client = h.client()
    await client.chat.completions.create(model=MODEL, messages=_msg("hi"), max_tokens=3)
    before = await h.stats()
    stalled = asyncio.ensure_future(client.chat.completions.create(model=MODEL, messages=_msg("STALL-TTFT")))
    await h.wait_stats(before, "received", 1)  # upstream, its deadline running on the proxy's clock
    # It asks for one answer, not a stream: its one deadline is total_timeout (the harness's 90 s).
    await clock.advance(91)
    with pytest.raises(openai.APIError):
        await stalled
    with pytest.raises(openai.APIError):
        await client.chat.completions.create(model=MODEL, messages=_msg("HTTP-503"))
    with pytest.raises(openai.APIError):
        await client.chat.completions.create(model="nope", messages=_msg("hi"))
    await client.models.list()
    assert len(h.rows()) == 4
    h.ledger.close()
    files = list(tmp_path.glob("ledger0.sqlite*"))
    assert files and not any(KEY.encode() in f.read_bytes() for f in files)
    assert caplog.records and KEY not in caplog.text
    assert "Bearer" not in caplog.text
    assert all(KEY not in json.dumps(e.detail, default=str) for e in h.events)


async def test_passthrough_endpoints_answer_as_the_upstream_does(
    harness: Factory, sim: RunningServer
) -> None:
    h = await harness()
    async with aiohttp.ClientSession() as s:
        for path in ("/v1/models", "/health", "/version", "/a/att-9/v1/models"):
            async with s.get(sim.url + path.replace("/a/att-9", "")) as direct:
                want = (direct.status, await direct.read())
            async with s.get(h.proxy.url + path) as r:
                assert (r.status, await r.read()) == want, path
        async with s.get(h.proxy.url + "/metrics") as r:
            assert r.status == 200 and "vllm:" in await r.text()
    models = await h.client().models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert h.rows() == []  # only generations are recorded


async def test_own_metrics_and_status_show_stalls_and_in_flight_requests(harness: Factory) -> None:
    clock = ManualClock()
    h = await harness(WatchdogConfig(ttft_timeout=1, stall_timeout=1.5, min_rate=0), clock=clock)
    client = h.client("att-s")
    await client.chat.completions.create(model=MODEL, messages=_msg("hi"), max_tokens=10)
    task = asyncio.create_task(_consume(client, "STALL-MID", stream=True, max_tokens=50))
    await h.tokens_in_flight(3)
    await clock.advance(0.8)
    async with aiohttp.ClientSession() as s:
        async with s.get(h.proxy.url + "/wedgewatch/status") as r:
            status = await r.json()
        (req,) = status["in_flight"]
        assert req["attempt_id"] == "att-s" and req["tokens_out"] == 3
        assert req["seconds_since_last_token"] == 0.8 and not task.done()
        assert h.proxy.in_flight("att-s") == 1 and h.proxy.in_flight("other") == 0
        await clock.advance(0.8)
        with pytest.raises(openai.APIError):
            await asyncio.wait_for(task, 10)
        async with s.get(h.proxy.url + "/wedgewatch/metrics") as r:
            prom = parse_prom(await r.text())
    assert prom.total("wedgewatch_proxy_requests_total", outcome="ok") == 1
    assert prom.total("wedgewatch_proxy_requests_total", outcome="stall_midstream") == 1
    assert prom.total("wedgewatch_proxy_stalls_total", kind="stall_midstream") == 1
    assert prom.total("wedgewatch_proxy_requests_in_flight") == 0
    # The stream's first token and its two gaps; the whole answer has neither to measure.
    assert prom.total("wedgewatch_proxy_ttft_seconds_count") == 1
    assert prom.total("wedgewatch_proxy_inter_token_seconds_count") == 2
    assert prom.total("wedgewatch_proxy_inter_token_seconds_bucket", le="+Inf") == 2


async def test_each_row_names_the_server_life_and_its_age_at_the_start(
    harness: Factory, sim: RunningServer
) -> None:
    h = await harness(upstream=ChangingLives(sim.url))
    for _ in range(2):
        await h.client().chat.completions.create(model=MODEL, messages=_msg("hi"), max_tokens=3)
    rows = h.rows()
    assert [(r["life_id"], r["age_seconds"], r["age_requests"], r["age_tokens"]) for r in rows] == [
        ("life-1", 10.0, 1, 100),
        ("life-2", 20.0, 2, 200),
    ]
    assert {e.detail["life_id"] for e in h.events} == {"life-1", "life-2"}
