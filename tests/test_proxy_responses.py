"""The Responses API (``POST /v1/responses``) through the watchdog proxy: the simulator as upstream
(a real subprocess serving the API as vLLM does), the proxy in this process on a real socket, the
OpenAI SDK's ``client.responses`` at its defaults (max_retries=2) as the client, a real SQLite
ledger. Faults are keyed by a word in the input (the bundled ``keywords`` scenario).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from conftest import RunningServer, Watched, sse_events
from wedgewatch.config import WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.proxy.dialects.responses import is_progress
from wedgewatch.testing import ScriptedUpstream
from wedgewatch.wire import fingerprint

KEY = "sk-wedgewatch-test-SECRET-7373"
MODEL = "sim-model"


TOOLS = [
    {
        "type": "function",
        "name": "list_files",
        "description": "List files",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "depth": {"type": "integer"}},
        },
    }
]


def client(h: Watched) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=h.proxy.url + "/a/att-r/v1", api_key=KEY)


async def _raw(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/responses", json=body) as r:
        return r.status, await r.read()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nostream"])
@pytest.mark.parametrize(
    ("kind", "prompt"), [("stall_ttft", "STALL-TTFT"), ("stall_midstream", "STALL-MID")], ids=["ttft", "mid"]
)
async def test_a_stalled_response_is_raised_at_once_without_retry(
    watched_manual: Watched, kind: str, prompt: str, stream: bool
) -> None:
    watched = watched_manual  # the 1 s deadlines run out when the test moves the clock
    before = await watched.received()
    deltas: list[str] = []

    async def ask() -> None:
        if stream:
            events = await client(watched).responses.create(model=MODEL, input=prompt, stream=True)
            async for ev in events:
                if ev.type == "response.output_text.delta":
                    deltas.append(ev.delta)
        else:
            await client(watched).responses.create(model=MODEL, input=prompt)

    call = asyncio.ensure_future(ask())
    if stream:
        await watched.past_the_deadline(call, before, tokens=5 if kind == "stall_midstream" else 0)
    else:  # one whole answer has no tokens to watch: only total_timeout (90 s here) ends it
        kind = "total_timeout"
        await watched.past_the_deadline(call, before, window=90.0)
    with pytest.raises(openai.APIError) as info:
        await asyncio.wait_for(call, 10)
    err = info.value
    assert isinstance(err.body, dict) and err.body["code"] == kind and err.body["type"] == "upstream_stalled"
    begun = stream and kind == "stall_midstream"
    if begun:  # the stream had begun: the SDK raised on the error event, after the 5 tokens
        assert not isinstance(err, openai.APIStatusError) and len(deltas) == 5
    else:
        assert isinstance(err, openai.APIStatusError) and err.status_code == 503
        assert err.response.headers["x-should-retry"] == "false"
    assert await watched.received() - before == 1  # no retry
    (row,) = watched.rows()
    assert row["outcome"] == kind and row["path"] == "/v1/responses" and row["attempt_id"] == "att-r"
    assert row["tokens_out"] == (5 if kind == "stall_midstream" else 0)
    assert row["http_status"] == (200 if begun else 503)
    stalls = [e for e in watched.events if e.kind == "stall"]
    assert len(stalls) == 1 and stalls[0].attempt_id == "att-r"


async def test_a_healthy_stream_goes_on_event_by_event_and_its_row_counts_the_tokens(
    watched: Watched, keywords_sim: RunningServer
) -> None:
    body = {"model": MODEL, "input": "Tell me a story.", "max_output_tokens": 40, "stream": True}
    status, direct = await _raw(keywords_sim.url, body)
    assert status == 200
    status, proxied = await _raw(watched.proxy.url, body)
    assert status == 200
    want, got = sse_events(direct), sse_events(proxied)
    # the same events in the same order, each still framed with its event: line
    assert [(name, obj["type"]) for name, obj in got] == [(name, obj["type"]) for name, obj in want]
    assert all(name == obj["type"] for name, obj in got)
    text = "".join(obj["delta"] for _, obj in got if obj["type"] == "response.output_text.delta")
    assert text == "".join(obj["delta"] for _, obj in want if obj["type"] == "response.output_text.delta")
    final = got[-1][1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    (row,) = watched.rows()
    assert row["outcome"] == "ok" and row["client_stream"] == 1
    assert row["tokens_out"] == 40 == final["usage"]["output_tokens"] == row["completion_tokens"]
    assert row["prompt_tokens"] == final["usage"]["input_tokens"]
    assert json.loads(row["detail_json"])["finish_reason"] == "max_output_tokens"
    assert row["ttft"] is not None and row["ttft"] > 0


@pytest.mark.parametrize("tools", [False, True], ids=["text", "function_call"])
async def test_a_non_streaming_answer_is_the_upstreams_response(
    watched: Watched, keywords_sim: RunningServer, tools: bool
) -> None:
    body: dict[str, Any] = {"model": MODEL, "instructions": "Be brief.", "input": "Tell me a story."}
    if tools:
        body |= {"input": [{"role": "user", "content": "Please call list_files now."}], "tools": TOOLS}
    status, raw = await _raw(keywords_sim.url, body)
    assert status == 200
    own = json.loads(raw)
    status, raw_proxied = await _raw(watched.proxy.url, body)  # sent upstream as it was
    assert status == 200
    mine = json.loads(raw_proxied)
    # The server's own answer, every field: only its ids and the time it was made differ.
    ids = {"id": None, "created_at": None, "output": [{**item, "id": None} for item in own["output"]]}
    mine["output"] = [{**item, "id": None} for item in mine["output"]]
    assert {**mine, **ids} == {**own, **ids}
    res = await client(watched).responses.create(**body)  # and the SDK reads it as any answer
    assert res.status == own["status"] == "completed"
    assert res.usage is not None and res.usage.output_tokens == own["usage"]["output_tokens"]
    assert [item.type for item in res.output] == [item["type"] for item in own["output"]]
    if tools:
        (call,) = res.output
        assert call.type == "function_call" and call.name == "list_files"
        assert json.loads(call.arguments) == {"path": "filler", "depth": 1}
        assert call.call_id == own["output"][0]["call_id"]
    else:
        assert res.output_text == own["output"][0]["content"][0]["text"] and len(res.output_text) > 40
    rows = watched.rows()
    assert [(r["outcome"], r["client_stream"]) for r in rows] == [("ok", 0), ("ok", 0)]
    # its tokens, from the answer's usage
    assert rows[0]["tokens_out"] == own["usage"]["output_tokens"] == rows[0]["completion_tokens"]


async def test_upstream_errors_on_the_responses_api_are_infra_errors_the_sdk_does_not_retry(
    watched: Watched,
) -> None:
    before = await watched.received()
    with pytest.raises(openai.InternalServerError) as info:
        await client(watched).responses.create(model=MODEL, input="HTTP-503 please")
    assert info.value.status_code == 503 and info.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(openai.APIError) as cut:
        events = await client(watched).responses.create(model=MODEL, input="DROP it", stream=True)
        async for _ in events:
            pass
    assert isinstance(cut.value.body, dict) and cut.value.body["code"] == "connection"
    assert await watched.received() - before == 2
    assert [r["outcome"] for r in watched.rows()] == ["upstream_http_503", "connection"]
    assert "after 3 tokens" in json.loads(watched.rows()[1]["detail_json"])["error"]


async def test_endings_the_simulator_does_not_send_are_read_as_a_responses_client_would(
    tmp_path: Path,
) -> None:
    """From a scripted server: a stream that ends without ``response.completed`` is cut
    (``stream_unfinished``, the SDK raises on the proxy's error event); the server's ``error`` event
    after a token is forwarded as it came and is the server's error in the row; a
    ``response.failed`` before any token is the server's error (``server_error``) or the
    request's (``invalid_prompt``), answered with the status that says which."""
    up = ScriptedUpstream()
    async with up.serve() as url:
        with Ledger(tmp_path / "l.sqlite") as ledger:
            proxy = Proxy(url, WatchdogConfig(ttft_timeout=2, stall_timeout=2), ledger=ledger)
            await proxy.start()
            try:
                client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key=KEY)
                raised: dict[str, openai.APIError] = {}
                for word in ("CUT", "FAILED0", "INVALID0"):
                    with pytest.raises(openai.APIError) as info:
                        events = await client.responses.create(model="m", input=word, stream=True)
                        async for _ in events:
                            pass
                    raised[word] = info.value
                # A [DONE] instead of response.completed (some gateways) ends the stream too.
                done = [
                    ev.type
                    async for ev in await client.responses.create(model="m", input="DONE", stream=True)
                ]
                # The server's own error event goes on as it came: the SDK hands it over as an
                # event; then the stream is cut short (a failed stream: no last chunk), which the
                # SDK raises on as its HTTP client's incomplete read.
                events = await client.responses.create(model="m", input="ERROR", stream=True)
                seen = []
                with pytest.raises(openai.APIConnectionError):
                    async for ev in events:
                        seen.append(ev)
            finally:
                await proxy.stop()
            rows = [dict(r) for r in ledger.query("SELECT * FROM requests ORDER BY started_at")]
    assert len(up.seen) == 5  # one request each: no retry
    assert [(r["outcome"], r["http_status"], r["tokens_out"]) for r in rows] == [
        ("stream_unfinished", 200, 1),
        ("stream_error_event", 500, 0),
        ("client_error", 400, 0),  # invalid_prompt: the request's fault, not the server's
        ("ok", 200, 1),
        ("stream_error_event", 200, 1),
    ]
    assert done == ["response.created", "response.output_text.delta"]
    assert "ended without response.completed after 1 tokens" in json.loads(rows[0]["detail_json"])["error"]
    assert raised["CUT"].body is not None and raised["CUT"].body["code"] == "stream_unfinished"  # type: ignore[index]
    assert [ev.type for ev in seen] == ["response.created", "response.output_text.delta", "error"]
    assert getattr(seen[-1], "message", None) == "engine died"
    failed = raised["FAILED0"]
    assert (
        isinstance(failed, openai.InternalServerError)
        and failed.response.headers["x-should-retry"] == "false"
    )
    assert "engine died" in json.loads(rows[1]["detail_json"])["error"]
    assert json.loads(rows[4]["detail_json"])["error"] == "engine died"
    invalid = raised["INVALID0"]
    assert isinstance(invalid, openai.BadRequestError) and invalid.message.endswith("the prompt was refused")


async def test_a_background_response_is_passed_through_unwatched(watched: Watched) -> None:
    """``background: true`` answers at once and generates detached: there is no stream to watch."""
    status, raw = await _raw(
        watched.proxy.url, {"model": MODEL, "input": "Tell me a story.", "background": True}
    )
    assert status == 200 and json.loads(raw)["object"] == "response"
    assert watched.rows() == []


@pytest.mark.parametrize(
    ("event", "progress"),
    [
        (b'{"type":"response.output_text.delta","delta":"Hi","item_id":"m"}', True),
        (b'{"content_index":0,"delta":"x","type":"response.reasoning_text.delta"}', True),
        (b'{"type":"response.function_call_arguments.delta","delta":"{\\"a"}', True),
        (b'{"type": "response.output_text.delta", "delta": "pretty"}', True),
        (b'{"type":"response.output_text.delta","delta":""}', False),
        (b'{"type":"response.reasoning.delta","delta":{"content":"We"},"sequence_number":4}', True),
        (b'{"type":"response.reasoning.delta","delta":{"content":""}}', False),
        (b'{"type":"response.output_item.added","item":{"type":"function_call","name":"f"}}', True),
        (b'{"type":"response.output_item.added","item":{"type":"message","content":[]}}', False),
        (b'{"type":"response.output_text.done","text":"\\"delta\\":\\"x"}', False),
        (b'{"type":"response.created","response":{"instructions":"say \\"delta\\":\\"no\\""}}', False),
    ],
)
def test_progress_is_generated_text_and_a_call_being_named(event: bytes, progress: bool) -> None:
    kind = json.loads(event)["type"]
    assert is_progress(kind, event) is progress


async def test_a_responses_request_is_fingerprinted_as_the_chat_turns_it_stands_for(
    watched: Watched,
) -> None:
    """``audit`` attributes a harness's requests by the lines of its prompt; a Responses API
    body says the same prompt in ``instructions`` and ``input`` items."""
    statement = "The parser rejects a leap day in a century year.\nIt must accept 2000-02-29 as valid."
    body = {
        "model": MODEL,
        "instructions": "You are a careful software engineer working in a repository.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": statement}]},
            {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "tests/test_cal.py failed"},
        ],
        "max_output_tokens": 4,
    }
    status, _ = await _raw(watched.proxy.url, body)
    assert status == 200
    (row,) = watched.rows()
    fp = json.loads(row["detail_json"])["fp"]
    twin = [
        {"role": "system", "content": body["instructions"]},
        {"role": "user", "content": statement},
        {"role": "tool", "content": "tests/test_cal.py failed"},
    ]
    assert fp == fingerprint.of_messages(twin)
    assert set(fingerprint.line_hashes(statement)) <= set(fp["lines"]) and len(fp["lines"]) == 3
