"""The watchdog proxy in front of the real llama.cpp server and the real bundled Gemma 3 270M.

The proxy must be invisible on healthy traffic (its assembled non-streaming answer is the
server's own), pass a client's disconnect on to the server, and end a request whose server froze
(SIGSTOP: a real process that simply stops) as `stall_midstream` within its window.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from conftest import RunningServer, launch
from wedgewatch.config import WatchdogConfig
from wedgewatch.launchers.llamacpp import launch_argv
from wedgewatch.proxy import Proxy
from wedgewatch.testing import eventually_async
from wedgewatch.wire import promtext
from wedgewatch.wire.sse import SSEParser

pytestmark = pytest.mark.xdist_group("llamacpp-proxy")  # one worker starts `llama` once

ALIAS = "gemma-proxy"
HELLO = [{"role": "user", "content": "Write hello world."}]
STALL = 3.0
WATCHDOG = WatchdogConfig(ttft_timeout=60, stall_timeout=STALL, min_rate=0, total_timeout=120)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    argv = launch_argv(ctx_size=2048, parallel=2, threads=1, alias=ALIAS)
    server = launch(argv, tmp_path_factory.mktemp("llama-proxy") / "llama.log", timeout=60)
    yield server
    os.kill(server.proc.pid, signal.SIGCONT)  # in case a test left it stopped
    server.stop()


def _since_last_token(row: dict[str, Any]) -> float:
    """A stalled request's silence when the proxy gave up on it, by the proxy's own clock (how soon
    after its window, in real seconds, is `wedgewatch bench`'s to measure, not asserted here)."""
    detail = row["detail_json"]
    return float((json.loads(detail) if isinstance(detail, str) else detail)["since_last_token"])


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def scrape(session: aiohttp.ClientSession, url: str) -> promtext.Samples:
    async with session.get(url + "/metrics") as resp:
        return promtext.parse(await resp.text())


async def test_assembled_answer_equals_the_servers_own(llama: RunningServer, tmp_path: Path) -> None:
    direct = openai.AsyncOpenAI(base_url=llama.v1, api_key="x", max_retries=0, timeout=60)
    own = await direct.chat.completions.create(model=ALIAS, messages=HELLO, max_tokens=32, temperature=0)
    async with Proxy(llama.url, WATCHDOG, records_path=tmp_path / "req.jsonl") as proxy:
        via = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0, timeout=60)
        got = await via.chat.completions.create(model=ALIAS, messages=HELLO, max_tokens=32, temperature=0)
    assert got.choices[0].message.content == own.choices[0].message.content
    assert got.choices[0].message.content
    assert got.choices[0].finish_reason == own.choices[0].finish_reason == "length"
    assert got.usage is not None and own.usage is not None
    assert (got.usage.prompt_tokens, got.usage.completion_tokens, got.usage.total_tokens) == (
        own.usage.prompt_tokens,
        own.usage.completion_tokens,
        own.usage.total_tokens,
    )
    [row] = records(tmp_path / "req.jsonl")
    assert row["outcome"] == "ok" and row["client_stream"] in (0, False)
    assert row["completion_tokens"] == 32


async def test_an_answer_sent_back_as_history_is_accepted_at_the_next_turn(
    llama: RunningServer, tmp_path: Path
) -> None:
    # The agent loop's own pattern: the SDK's message object appended to the history. llama.cpp
    # refuses a reasoning_content that is not a string; the proxy once added a null one.
    async with Proxy(llama.url, WATCHDOG, records_path=tmp_path / "req.jsonl") as proxy:
        via = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0, timeout=60)
        messages: list[Any] = list(HELLO)
        for _ in range(2):
            res = await via.chat.completions.create(
                model=ALIAS, messages=messages, max_tokens=8, temperature=0
            )
            messages += [res.choices[0].message, {"role": "user", "content": "Again, shorter."}]
    assert [r["outcome"] for r in records(tmp_path / "req.jsonl")] == ["ok", "ok"]


async def test_a_client_given_the_servers_root_is_watched_too(llama: RunningServer, tmp_path: Path) -> None:
    # llama.cpp serves /chat/completions as well as /v1/chat/completions: a client whose base URL
    # is the server's root (no /v1) uses it, and the proxy must watch it as a generation.
    async with Proxy(llama.url, WATCHDOG, records_path=tmp_path / "req.jsonl") as proxy:
        root = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0, timeout=60)
        stream = await root.chat.completions.create(
            model=ALIAS, messages=HELLO, max_tokens=8, temperature=0, stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text
    [row] = records(tmp_path / "req.jsonl")
    assert (row["path"], row["outcome"], row["tokens_out"]) == ("/chat/completions", "ok", 8)


async def _chunks(url: str, **extra: Any) -> list[dict[str, Any]]:
    body = {"model": ALIAS, "messages": HELLO, "max_tokens": 8, "temperature": 0, "stream": True, **extra}
    parser = SSEParser()
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", json=body) as resp:
        events = parser.feed(await resp.read()) + parser.close()
    return [json.loads(e.data) for e in events if e.data not in (None, b"[DONE]")]


async def test_a_stream_has_the_servers_own_shape_whether_or_not_usage_was_asked(
    llama: RunningServer, tmp_path: Path
) -> None:
    # The proxy asks for usage on every stream; llama.cpp then moves its `timings` from the finish
    # chunk to the usage-only chunk. Either way the client's stream has the chunks and fields the
    # server sends it directly: `timings` on the finish chunk unless usage was asked for.
    async with Proxy(llama.url, WATCHDOG, records_path=tmp_path / "req.jsonl") as proxy:
        for extra in ({}, {"stream_options": {"include_usage": True}}):
            own, via = await _chunks(llama.url, **extra), await _chunks(proxy.url, **extra)
            assert [sorted(c) for c in via] == [sorted(c) for c in own], extra
            assert [c["choices"] for c in via] == [c["choices"] for c in own]
            timed = [n for n, c in enumerate(own) if "timings" in c]
            assert timed == [len(own) - 1] and via[-1]["timings"]["predicted_n"] == 8
            assert bool(own[-1]["choices"]) == (not extra)  # the finish chunk / the usage chunk
    assert [r["completion_tokens"] for r in records(tmp_path / "req.jsonl")] == [8, 8]


async def test_client_disconnect_through_the_proxy_stops_generation(
    llama: RunningServer, tmp_path: Path
) -> None:
    body = {"model": ALIAS, "messages": HELLO, "max_tokens": 1500, "temperature": 0, "stream": True}
    async with (
        Proxy(llama.url, WATCHDOG, records_path=tmp_path / "req.jsonl") as proxy,
        aiohttp.ClientSession() as s,
    ):
        resp = await s.post(proxy.url + "/v1/chat/completions", json=body)
        parser, events = SSEParser(), 0
        async for chunk in resp.content.iter_any():
            events += sum(e.data is not None for e in parser.feed(chunk))
            if events >= 10:
                break
        assert (await scrape(s, llama.url)).total("llamacpp:requests_processing") == 1
        resp.close()

        async def stopped() -> bool:
            return not (await scrape(s, llama.url)).total("llamacpp:requests_processing")

        await eventually_async(stopped, timeout=5, what="the server stopped generating")
        first = await scrape(s, llama.url)
        await asyncio.sleep(1.0)  # a stopped counter must stay still: only time passing can show it
        second = await scrape(s, llama.url)
        path = tmp_path / "req.jsonl"
        await eventually_async(lambda: path.exists() and records(path), what="the request's row")
    assert second.total("llamacpp:n_decode_total") == first.total("llamacpp:n_decode_total")
    predicted = second.total("llamacpp:tokens_predicted_total") or 0
    assert predicted < 1500
    [row] = records(tmp_path / "req.jsonl")
    assert row["outcome"] == "client_disconnect"


async def test_sigstop_midstream_is_stall_midstream_within_the_window(
    llama: RunningServer, tmp_path: Path
) -> None:
    pid = llama.proc.pid
    async with Proxy(llama.url, WATCHDOG, records_path=tmp_path / "req.jsonl") as proxy:
        client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0, timeout=60)
        stream = await client.chat.completions.create(
            model=ALIAS, messages=HELLO, max_tokens=1500, temperature=0, stream=True
        )
        chunks = 0
        stopped = False
        try:
            with pytest.raises(openai.APIError) as caught:
                async for _ in stream:
                    chunks += 1
                    if chunks == 5:
                        os.kill(pid, signal.SIGSTOP)
                        stopped = True
        finally:
            os.kill(pid, signal.SIGCONT)
    assert stopped
    body = caught.value.body
    assert isinstance(body, dict) and body.get("code") == "stall_midstream", body
    [row] = records(tmp_path / "req.jsonl")
    assert (
        row["outcome"] == "stall_midstream" and row["tokens_out"] >= 4
    )  # the first chunk carries the role, not a token
    assert _since_last_token(row) >= STALL  # the window ran from the last token, the whole of it

    # Resumed, the same server answers again: the freeze was the process, not the model.
    direct = openai.AsyncOpenAI(base_url=llama.v1, api_key="x", max_retries=0, timeout=60)
    again = await direct.chat.completions.create(model=ALIAS, messages=HELLO, max_tokens=4, temperature=0)
    assert again.usage is not None and again.usage.completion_tokens == 4


async def test_the_responses_api_is_watched_on_the_real_server_too(
    llama: RunningServer, tmp_path: Path
) -> None:
    """llama.cpp serves ``/v1/responses``: the proxy's non-streaming answer is the server's own
    response, each token of a stream counts, and a frozen server is ``stall_midstream``."""
    direct = openai.AsyncOpenAI(base_url=llama.v1, api_key="x", max_retries=0, timeout=60)
    own = await direct.responses.create(
        model=ALIAS, input="Write hello world.", max_output_tokens=16, temperature=0
    )
    pid = llama.proc.pid
    async with Proxy(llama.url, WATCHDOG, records_path=tmp_path / "req.jsonl") as proxy:
        via = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0, timeout=60)
        got = await via.responses.create(
            model=ALIAS, input="Write hello world.", max_output_tokens=16, temperature=0
        )
        stream = await via.responses.create(
            model=ALIAS, input="Write hello world.", max_output_tokens=1500, temperature=0, stream=True
        )
        deltas = 0
        stopped = False
        try:
            with pytest.raises(openai.APIError) as caught:
                async for ev in stream:
                    if ev.type == "response.output_text.delta":
                        deltas += 1
                        if deltas == 5:
                            os.kill(pid, signal.SIGSTOP)
                            stopped = True
        finally:
            os.kill(pid, signal.SIGCONT)
    assert got.output_text == own.output_text and got.output_text
    assert got.usage is not None and own.usage is not None
    assert got.usage.output_tokens == own.usage.output_tokens == 16
    assert stopped
    body = caught.value.body
    assert isinstance(body, dict) and body.get("code") == "stall_midstream", body
    whole, frozen = records(tmp_path / "req.jsonl")
    assert whole["path"] == "/v1/responses" and whole["outcome"] == "ok"
    assert whole["tokens_out"] == whole["completion_tokens"] == 16 and whole["prompt_tokens"] > 0
    assert frozen["outcome"] == "stall_midstream" and frozen["tokens_out"] >= 5
    assert _since_last_token(frozen) >= STALL


async def test_the_messages_api_is_watched_on_the_real_server_too(
    llama: RunningServer, tmp_path: Path
) -> None:
    """llama.cpp serves Anthropic's ``/v1/messages``: the proxy's non-streaming answer is the
    server's own message, each token of a stream counts, and a frozen server is ``stall_midstream``."""
    import anthropic

    msgs = [{"role": "user", "content": "Write hello world."}]
    zero = {"temperature": 0}  # as extra_body: this SDK release takes no temperature argument
    direct = anthropic.AsyncAnthropic(base_url=llama.url, api_key="x", max_retries=0, timeout=60)
    own = await direct.messages.create(model=ALIAS, max_tokens=16, messages=msgs, extra_body=zero)  # type: ignore[arg-type]
    pid = llama.proc.pid
    async with Proxy(llama.url, WATCHDOG, records_path=tmp_path / "req.jsonl") as proxy:
        via = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="x", max_retries=0, timeout=60)
        got = await via.messages.create(model=ALIAS, max_tokens=16, messages=msgs, extra_body=zero)  # type: ignore[arg-type]
        deltas = 0
        stopped = False
        try:
            with pytest.raises(anthropic.APIStatusError) as caught:
                async with via.messages.stream(
                    model=ALIAS, max_tokens=1500, messages=msgs, extra_body=zero
                ) as s:  # type: ignore[arg-type]
                    async for _ in s.text_stream:
                        deltas += 1
                        if deltas == 5:
                            os.kill(pid, signal.SIGSTOP)
                            stopped = True
        finally:
            os.kill(pid, signal.SIGCONT)
    assert [b.model_dump() for b in got.content] == [b.model_dump() for b in own.content] and got.content
    assert got.usage.output_tokens == own.usage.output_tokens == 16 and got.stop_reason == own.stop_reason
    assert stopped
    body = caught.value.body
    assert isinstance(body, dict) and body["error"]["code"] == "stall_midstream", body
    whole, frozen = records(tmp_path / "req.jsonl")
    assert whole["path"] == "/v1/messages" and whole["outcome"] == "ok"
    assert whole["tokens_out"] == whole["completion_tokens"] == 16 and whole["prompt_tokens"] > 0
    assert frozen["outcome"] == "stall_midstream" and frozen["tokens_out"] >= 5
    assert _since_last_token(frozen) >= STALL
