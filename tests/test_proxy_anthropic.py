"""Anthropic's Messages API (``POST /v1/messages``) through the watchdog proxy: the simulator as
upstream (a real subprocess serving the API as vLLM and llama.cpp do), the proxy in this process
on a real socket, the Anthropic SDK at its defaults (max_retries=2) as the client, a real SQLite
ledger. Faults are keyed by a word in the last user message (the bundled ``keywords`` scenario).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from conftest import RunningServer, Watched, sse_events
from wedgewatch.config import WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.proxy.dialects.messages import is_progress
from wedgewatch.testing import ScriptedUpstream
from wedgewatch.wire import fingerprint

if TYPE_CHECKING:
    import anthropic

# The SDK is imported in the tests that use it (about 1 CPU-s: every xdist worker imports this
# module to collect it), and one worker runs them all, so one worker pays for it and starts the
# module's simulator.
pytestmark = pytest.mark.xdist_group("anthropic-sdk")

KEY = "sk-ant-wedgewatch-test-SECRET-5151"
MODEL = "sim-model"
TOOLS = [
    {
        "name": "list_files",
        "description": "List files",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "depth": {"type": "integer"}},
        },
    }
]


def client(h: Watched) -> anthropic.AsyncAnthropic:
    import anthropic

    return anthropic.AsyncAnthropic(base_url=h.proxy.url + "/a/att-m", api_key=KEY)


async def _raw(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/messages", json=body) as r:
        return r.status, await r.read()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nostream"])
@pytest.mark.parametrize(
    ("kind", "prompt"), [("stall_ttft", "STALL-TTFT"), ("stall_midstream", "STALL-MID")], ids=["ttft", "mid"]
)
async def test_a_stalled_message_is_raised_at_once_without_retry(
    watched_manual: Watched, kind: str, prompt: str, stream: bool
) -> None:
    import anthropic

    watched = watched_manual  # the 1 s deadlines run out when the test moves the clock
    before = await watched.received()
    texts: list[str] = []
    body = {"model": MODEL, "max_tokens": 500, "messages": [{"role": "user", "content": prompt}]}

    async def ask() -> None:
        if stream:
            async with client(watched).messages.stream(**body) as events:  # type: ignore[arg-type]
                async for text in events.text_stream:
                    texts.append(text)
        else:
            await client(watched).messages.create(**body)  # type: ignore[arg-type]

    call = asyncio.ensure_future(ask())
    if stream:
        await watched.past_the_deadline(call, before, tokens=5 if kind == "stall_midstream" else 0)
    else:  # one whole answer has no tokens to watch: only total_timeout (90 s here) ends it
        kind = "total_timeout"
        await watched.past_the_deadline(call, before, window=90.0)
    with pytest.raises(anthropic.APIStatusError) as info:
        await asyncio.wait_for(call, 10)
    err = info.value
    inner = err.body.get("error") if isinstance(err.body, dict) else None
    assert isinstance(inner, dict) and inner["type"] == "upstream_stalled" and inner["code"] == kind, err.body
    begun = stream and kind == "stall_midstream"
    if begun:  # the stream had begun: the SDK raised on the proxy's error event, after 5 tokens
        assert err.status_code == 200 and len(texts) == 5
    else:
        assert err.status_code == 503 and err.response.headers["x-should-retry"] == "false"
    assert await watched.received() - before == 1  # no retry
    (row,) = watched.rows()
    assert row["outcome"] == kind and row["path"] == "/v1/messages" and row["attempt_id"] == "att-m"
    assert row["tokens_out"] == (5 if kind == "stall_midstream" else 0)
    assert row["http_status"] == (200 if begun else 503)
    if stream:
        assert row["prompt_tokens"] is not None and row["prompt_tokens"] > 0  # from message_start
    stalls = [e for e in watched.events if e.kind == "stall"]
    assert len(stalls) == 1 and stalls[0].attempt_id == "att-m"


async def test_a_healthy_stream_goes_on_event_by_event_and_its_row_counts_the_tokens(
    watched: Watched, keywords_sim: RunningServer
) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 30,
        "stream": True,
        "messages": [{"role": "user", "content": "Tell me."}],
    }
    status, direct = await _raw(keywords_sim.url, body)
    assert status == 200
    status, proxied = await _raw(watched.proxy.url, body)
    assert status == 200
    want, got = sse_events(direct), sse_events(proxied)
    # the same events in the same order, each still framed with its event: line, the same text
    assert [(name, obj["type"]) for name, obj in got] == [(name, obj["type"]) for name, obj in want]
    assert all(name == obj["type"] for name, obj in got)
    deltas = [obj["delta"]["text"] for _, obj in got if obj["type"] == "content_block_delta"]
    assert deltas == [obj["delta"]["text"] for _, obj in want if obj["type"] == "content_block_delta"]
    assert got[-2][1]["delta"]["stop_reason"] == "max_tokens" and got[-1][1]["type"] == "message_stop"
    (row,) = watched.rows()
    assert row["outcome"] == "ok" and row["client_stream"] == 1
    assert row["tokens_out"] == len(deltas) == 30 == row["completion_tokens"]
    assert row["prompt_tokens"] == got[0][1]["message"]["usage"]["input_tokens"]
    assert json.loads(row["detail_json"])["finish_reason"] == "max_tokens"


@pytest.mark.parametrize("tools", [False, True], ids=["text", "tool_use"])
async def test_a_non_streaming_answer_is_the_message_the_server_would_give(
    watched: Watched, keywords_sim: RunningServer, tools: bool
) -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 60,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Tell me a story."}],
    }
    if tools:
        body |= {"messages": [{"role": "user", "content": "Please call list_files now."}], "tools": TOOLS}
    status, raw = await _raw(keywords_sim.url, body)
    assert status == 200
    own = json.loads(raw)
    status, raw_proxied = await _raw(watched.proxy.url, body)  # sent upstream as it was
    assert status == 200
    mine = json.loads(raw_proxied)
    assert {**mine, "id": None} == {**own, "id": None}  # the server's own answer, every field
    got = await client(watched).messages.create(**body)  # and the SDK reads it as any answer
    if tools:
        (block,) = got.content
        assert block.type == "tool_use" and block.name == "list_files"
        assert block.input == {"path": "filler", "depth": 1} and got.stop_reason == "tool_use"
    else:
        assert got.content[0].type == "text" and len(got.content[0].text) > 40
    rows = watched.rows()
    assert [(r["outcome"], r["client_stream"]) for r in rows] == [("ok", 0), ("ok", 0)]
    row = rows[0]
    # its tokens, from the answer's usage
    assert row["tokens_out"] == own["usage"]["output_tokens"] == row["completion_tokens"]
    assert row["ttft"] is None and row["max_gap"] is None  # a whole answer has neither


async def test_upstream_errors_on_the_messages_api_are_infra_errors_the_sdk_does_not_retry(
    watched: Watched,
) -> None:
    import anthropic

    before = await watched.received()
    with pytest.raises(anthropic.APIStatusError) as info:
        await client(watched).messages.create(
            model=MODEL, max_tokens=50, messages=[{"role": "user", "content": "HTTP-503 please"}]
        )
    assert info.value.status_code == 503 and info.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(anthropic.APIStatusError) as cut:
        async with client(watched).messages.stream(
            model=MODEL, max_tokens=50, messages=[{"role": "user", "content": "DROP it"}]
        ) as events:
            async for _ in events.text_stream:
                pass
    assert isinstance(cut.value.body, dict) and cut.value.body["error"]["code"] == "connection"
    assert await watched.received() - before == 2
    assert [r["outcome"] for r in watched.rows()] == ["upstream_http_503", "connection"]


async def test_endings_the_simulator_does_not_send_are_read_as_anthropics_client_would(
    tmp_path: Path,
) -> None:
    """From a scripted server: a stream that ends without ``message_stop`` is cut (the SDK
    raises on the proxy's error event); the server's own error event after a token goes on as it
    came (the SDK raises on it) and its type is the row's status; an ``overloaded_error`` before
    any token is answered with Anthropic's 529 for it."""
    import anthropic

    up = ScriptedUpstream()
    async with up.serve() as url:
        with Ledger(tmp_path / "l.sqlite") as ledger:
            proxy = Proxy(url, WatchdogConfig(ttft_timeout=2, stall_timeout=2), ledger=ledger)
            await proxy.start()
            try:
                client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
                raised: dict[str, anthropic.APIStatusError] = {}
                for word in ("CUT", "ERROR", "OVERLOADED0"):
                    with pytest.raises(anthropic.APIStatusError) as info:
                        msgs = [{"role": "user", "content": word}]
                        async with client.messages.stream(model="m", max_tokens=9, messages=msgs) as events:  # type: ignore[arg-type]
                            async for _ in events.text_stream:
                                pass
                    raised[word] = info.value
            finally:
                await proxy.stop()
            rows = [dict(r) for r in ledger.query("SELECT * FROM requests ORDER BY started_at")]
    assert len(up.seen) == 3  # one request each: no retry
    assert [(r["outcome"], r["http_status"], r["tokens_out"], r["prompt_tokens"]) for r in rows] == [
        ("stream_unfinished", 200, 1, 7),
        ("stream_error_event", 200, 1, 7),
        ("stream_error_event", 529, 0, 7),
    ]
    assert "ended without message_stop after 1 tokens" in json.loads(rows[0]["detail_json"])["error"]
    assert raised["CUT"].body["error"]["code"] == "stream_unfinished"  # type: ignore[index]
    assert raised["ERROR"].body == {"type": "error", "error": {"type": "api_error", "message": "engine died"}}
    assert raised["OVERLOADED0"].status_code == 529


async def test_a_messages_request_is_fingerprinted_with_its_system_prompt(watched: Watched) -> None:
    statement = "The parser rejects a leap day in a century year.\nIt must accept 2000-02-29 as valid."
    system = "You are a careful software engineer working in a repository."
    body = {
        "model": MODEL,
        "max_tokens": 4,
        "system": system,
        "messages": [{"role": "user", "content": [{"type": "text", "text": statement}]}],
    }
    status, _ = await _raw(watched.proxy.url, body)
    assert status == 200
    (row,) = watched.rows()
    fp = json.loads(row["detail_json"])["fp"]
    twin = [{"role": "system", "content": system}, {"role": "user", "content": statement}]
    assert fp == fingerprint.of_messages(twin) and len(fp["lines"]) == 3


@pytest.mark.parametrize(
    ("kind", "event", "progress"),
    [
        ("content_block_delta", b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}', True),
        ("content_block_delta", b'{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"h"}}', True),
        ("content_block_delta", b'{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"a"}}', True),
        ("content_block_delta", b'{"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}}', True),
        ("content_block_delta", b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}', False),
        ("content_block_delta", b'{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}', False),
        ("content_block_start", b'{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}', True),
        ("content_block_start", b'{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}', False),
        ("message_start", b'{"type":"message_start","message":{"content":[{"type":"text","text":"earlier"}]}}', False),
    ],
)  # fmt: skip
def test_progress_is_generated_text_and_a_tool_being_named(kind: str, event: bytes, progress: bool) -> None:
    assert is_progress(kind, event) is progress
