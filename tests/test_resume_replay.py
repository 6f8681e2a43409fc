"""A begun Responses API or Messages API stream survives a wedge too, and so does a chat stream
that text cannot continue exactly (a tool call cut inside its arguments): the proxy sends the
request again whole on the next life and swallows the new leg's events until they reach what the
client already has, then forwards the rest under the first leg's ids (replay and skip,
proxy/resume/replay.py, chat_replay.py).
Real simulator subprocesses behind the real stack; the clients are the real SDKs' stream
accumulators (OpenAI's ``responses.stream()``, Anthropic's ``messages.stream()``), which track
items and blocks by id and index; the simulator's replies are deterministic, so the resumed
answer is held to the answer of a request no wedge touched. A replay that says something else
than the client has read fails the request as without resume, its row saying why."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai

from conftest import read_cut, sse_events
from wedgewatch.base import vocab
from wedgewatch.config import ServerConfig, WarmupConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy.resume.chat_replay import ChatReplay
from wedgewatch.proxy.resume.replay import Replay
from wedgewatch.sim.chunks import ChatEncoder, Reply, Unit
from wedgewatch.sim.responses import ResponsesEncoder
from wedgewatch.stack.servers import Stack
from wedgewatch.wire.sse import SSEParser

PROMPT = "WEDGE: write a short story about a lighthouse"
TOOL = {"type": "object", "properties": {f"field_{i}": {"type": "string"} for i in range(10)}}


def _scenario(tmp_path: Path, after: int) -> Path:
    marker = tmp_path / "struck"  # the wedge strikes once, on whichever life meets it first
    text = (
        f'[[fault]]\nwhen.contains = "WEDGE"\naction = "wedge"\nafter_tokens = {after}\nmarker = "{marker}"\n'
    )
    (tmp_path / "scenario.toml").write_text(text)
    return tmp_path / "scenario.toml"


@asynccontextmanager
async def _stack(
    tmp_path: Path, after: int = 7, sampled: bool = False
) -> AsyncIterator[tuple[Stack, Ledger]]:
    ledger = Ledger(tmp_path / "l.sqlite")
    launcher = None
    if sampled:  # each life its own seed: a model that samples, whose replay is another reply
        launcher = tmp_path / "sampled.sh"
        launcher.write_text(f'#!/bin/sh\nexec {sys.executable} -m wedgewatch "$@" --seed $$\n')
        launcher.chmod(0o755)
    server = ServerConfig(
        profile="sim",
        launcher=str(launcher) if launcher else None,
        scenario=str(_scenario(tmp_path, after)),
        log_dir=str(tmp_path / "logs"),
        scrape_interval=0.2,
        heartbeat_window=1.0,
        restart_backoff=0.1,
        warmup=WarmupConfig(count=1, max_tokens=2),
    )
    async with Stack(server, WatchdogConfig(), ledger=ledger) as stack:
        yield stack, ledger


def _rows(ledger: Ledger) -> list[dict[str, Any]]:
    return [dict(r) for r in ledger.query("SELECT * FROM requests ORDER BY started_at")]


def _legs(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The struck request's two legs: the one resumed, and the one that ended it."""
    (first,) = [r for r in rows if r["outcome"] == vocab.RESUMED]
    detail = json.loads(first["detail_json"])
    (second,) = [r for r in rows if r["request_id"] == detail["resumed_as"]]
    assert json.loads(second["detail_json"])["resumes"] == first["request_id"]
    assert first["life_id"] != second["life_id"]
    return first, second


async def _raw(url: str, path: str, body: dict[str, Any]) -> tuple[int, list[tuple[str | None, Any]]]:
    async with aiohttp.ClientSession() as s, s.post(url + path, json=body) as r:
        raw, cut = await read_cut(r)
        events = sse_events(raw)
        assert cut == (events[-1][0] == "error")  # a failed stream is cut short after its error
        return r.status, events


def _ids_hold(events: list[tuple[str | None, dict[str, Any]]]) -> None:
    """What an SDK's accumulator relies on: one response id, sequence numbers 0, 1, 2, ... and
    every event about an item naming an item the stream opened at that index."""
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    created = events[0][1]["response"]["id"]
    items: dict[int, str] = {}
    for kind, e in events:
        if "response" in e:
            assert e["response"]["id"] == created, kind
        if kind == "response.output_item.added":
            items[e["output_index"]] = e["item"]["id"]
        elif "item_id" in e:
            assert items[e["output_index"]] == e["item_id"], kind
    final = events[-1][1]["response"]
    assert [o["id"] for o in final["output"]] == [items[i] for i in sorted(items)]


async def test_a_responses_stream_wedged_midway_is_one_stream_for_the_sdk(tmp_path: Path) -> None:
    body = {"model": "sim-model", "input": PROMPT, "stream": True}
    async with _stack(tmp_path) as (stack, ledger):
        status, events = await _raw(stack.url, "/v1/responses", body)
        client = openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0)
        # The same request again through the SDK's accumulator, and once more untouched: the
        # wedge struck its one time already, so both are clean.
        async with client.responses.stream(model="sim-model", input=PROMPT) as s:
            clean = await s.get_final_response()
    assert status == 200 and events[-1][0] == "response.completed"
    _ids_hold(events)
    text = "".join(e["delta"] for k, e in events if k == "response.output_text.delta")
    assert text == clean.output_text and len(text) > 40
    assert events[-1][1]["response"]["output"][0]["content"][0]["text"] == clean.output_text
    assert events[-1][1]["response"]["usage"]["output_tokens"] == clean.usage.output_tokens  # type: ignore[union-attr]
    first, second = _legs(_rows(ledger))
    assert first["tokens_out"] == 7 and second["outcome"] == vocab.OK


async def test_the_openai_sdk_stream_accumulator_reads_a_resumed_response_whole(tmp_path: Path) -> None:
    client_args = {"model": "sim-model", "input": PROMPT}
    async with _stack(tmp_path) as (stack, ledger):
        client = openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0)
        async with client.responses.stream(**client_args) as s:  # type: ignore[call-overload]
            deltas = [e.delta async for e in s if e.type == "response.output_text.delta"]
            resumed = await s.get_final_response()
        async with client.responses.stream(**client_args) as s:  # type: ignore[call-overload]
            clean = await s.get_final_response()
    assert "".join(deltas) == resumed.output_text == clean.output_text
    assert resumed.status == "completed" and len(resumed.output) == len(clean.output)
    _legs(_rows(ledger))


async def test_a_function_call_cut_in_its_arguments_is_replayed_whole(tmp_path: Path) -> None:
    """Text cannot continue a call's arguments exactly (chat fails it); a replay compares them to
    the character, so the call the client reads is the call the model made."""
    tools = [{"type": "function", "name": "lighthouse", "parameters": TOOL}]
    body = {"model": "sim-model", "input": PROMPT, "tools": tools, "stream": True}
    async with _stack(tmp_path) as (stack, ledger):
        status, events = await _raw(stack.url, "/v1/responses", body)
        _, clean = await _raw(stack.url, "/v1/responses", body)
    assert status == 200
    _ids_hold(events)
    args = "".join(e["delta"] for k, e in events if k == "response.function_call_arguments.delta")
    assert json.loads(args) == {f"field_{i}": "filler" for i in range(10)}
    call, clean_call = events[-1][1]["response"]["output"][0], clean[-1][1]["response"]["output"][0]
    assert call["arguments"] == clean_call["arguments"] == args
    added = next(e for k, e in events if k == "response.output_item.added")["item"]
    assert call["call_id"] == added["call_id"]  # the id the client was given first
    _legs(_rows(ledger))


async def test_a_chat_tool_call_cut_in_its_arguments_is_replayed_whole(tmp_path: Path) -> None:
    """The OpenAI SDK's chat stream accumulator (``chat.completions.stream``) reads one call, its
    arguments those of a request no wedge touched, under one id with one role chunk."""
    tools = [{"type": "function", "function": {"name": "lighthouse", "parameters": TOOL}}]
    body = {"model": "sim-model", "messages": [{"role": "user", "content": PROMPT}], "tools": tools}
    async with _stack(tmp_path) as (stack, ledger):
        status, raw = await _raw(stack.url, "/v1/chat/completions", {**body, "stream": True})
        client = openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0)
        async with client.chat.completions.stream(**body) as s:  # type: ignore[arg-type]
            clean = await s.get_final_completion()
    assert status == 200
    chunks = [e for _, e in raw]
    assert len({c["id"] for c in chunks}) == 1
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    assert sum(1 for d in deltas if "role" in d) == 1
    pieces = [p for d in deltas for p in d.get("tool_calls") or ()]
    assert sum(1 for p in pieces if p.get("id")) == 1  # the call opened once
    args = "".join(p["function"].get("arguments") or "" for p in pieces)
    (call,) = clean.choices[0].message.tool_calls or []
    assert args == call.function.arguments and json.loads(args) == {f"field_{i}": "filler" for i in range(10)}
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]] == [
        "tool_calls"
    ]
    first, second = _legs(_rows(ledger))
    assert first["tokens_out"] == 7 and second["outcome"] == vocab.OK


async def test_a_messages_stream_wedged_midway_is_one_message_for_anthropics_sdk(tmp_path: Path) -> None:
    args = {"model": "sim-model", "max_tokens": 40, "messages": [{"role": "user", "content": PROMPT}]}
    async with _stack(tmp_path) as (stack, ledger):
        client = anthropic.AsyncAnthropic(base_url=stack.url, api_key="x", max_retries=0)
        async with client.messages.stream(**args) as s:  # type: ignore[arg-type]
            kinds = [e.type async for e in s]
            resumed = await s.get_final_message()
        status, raw = await _raw(stack.url, "/v1/messages", {**args, "stream": True})
    assert status == 200
    clean_text = "".join(e["delta"]["text"] for k, e in raw if k == "content_block_delta")
    assert resumed.content[0].text == clean_text and len(clean_text) > 40  # type: ignore[union-attr]
    assert len(resumed.content) == 1 and resumed.stop_reason == "max_tokens"
    assert resumed.usage.output_tokens == 40
    assert kinds.count("message_start") == kinds.count("content_block_start") == 1
    assert kinds.count("message_stop") == 1
    first, second = _legs(_rows(ledger))
    assert first["tokens_out"] == 7 and second["outcome"] == vocab.OK


async def test_a_replay_that_is_another_reply_fails_as_without_resume_and_says_why(tmp_path: Path) -> None:
    body = {"model": "sim-model", "input": PROMPT, "stream": True}
    async with _stack(tmp_path, sampled=True) as (stack, ledger):
        status, events = await _raw(stack.url, "/v1/responses", body)
    assert status == 200
    kind, last = events[-1]
    assert kind == "error" and last["error"]["type"] == "upstream_error"
    assert [e["sequence_number"] for _, e in events[:-1]] == list(range(len(events) - 1))
    deltas = [e["delta"] for k, e in events if k == "response.output_text.delta"]
    assert len(deltas) == 7  # the first leg's, nothing of the other reply
    first, second = _legs(_rows(ledger))
    assert second["outcome"] == json.loads(first["detail_json"])["cause"]
    assert "departed" in json.loads(second["detail_json"])["not_resumed"]


def _events(raw: bytes) -> list[Any]:
    parser = SSEParser()
    return [e for e in parser.feed(raw) + parser.close() if e.data is not None]


def _encoded(text: list[str]) -> bytes:
    enc = ResponsesEncoder("m", Reply([Unit("content", t) for t in text], "stop", None))
    return enc.role_chunk() + b"".join(enc.unit_chunks()) + enc.tail(3, len(text), False)


def test_a_replay_that_says_something_else_departs_and_one_cut_elsewhere_goes_on() -> None:
    """The splice on its own, over the simulator's encoder's bytes: the first leg relayed its
    events up to " b"; a replay with other text departs, one whose token boundary falls inside
    the relayed text's last piece goes on with only the new part, under the first leg's ids."""
    first = _events(_encoded([" a", " b", " c", " d"]))
    relayed = [e.data for e in first[:6]]  # created, in_progress, item added, part added, " a", " b"
    other = Replay(relayed, ("stall_midstream", "no token"))
    out = [other.rewrite(e) for e in _events(_encoded([" a", " x", " c"]))]
    assert other.departed is not None and "departed" in other.departed
    assert all(e is None for e in out[:5])

    shifted = Replay(relayed, ("stall_midstream", "no token"))
    replay = _events(_encoded([" a", " b c", " d"]))
    forwarded = [e for e in map(shifted.rewrite, replay) if e is not None]
    assert shifted.departed is None
    got = [json.loads(e.data or b"") for e in forwarded]
    assert got[0]["type"] == "response.output_text.delta" and got[0]["delta"] == " c"
    text = "".join(g.get("delta", "") for g in got if g["type"] == "response.output_text.delta")
    assert text == " c d"
    assert [g["sequence_number"] for g in got] == list(range(6, 6 + len(got)))
    first_item = json.loads(first[2].data or b"")["item"]["id"]
    assert {g["item_id"] for g in got if "item_id" in g} == {first_item}
    assert got[-1]["response"]["id"] == json.loads(first[0].data or b"")["response"]["id"]
    assert got[-1]["response"]["output"][0]["id"] == first_item


def _chat(text: list[str]) -> list[bytes]:
    enc = ChatEncoder("m", Reply([Unit("content", t) for t in text], "stop", None))
    raw = enc.role_chunk() + b"".join(enc.unit_chunks()) + enc.tail(3, len(text), True)
    return [e.data for e in _events(raw) if e.data not in (None, b"[DONE]")]  # type: ignore[misc]


def test_a_chat_replay_goes_on_past_the_clients_text_and_departs_from_other_text() -> None:
    relayed = _chat([" a", " b", " c", " d"])[:3]  # the role chunk, " a", " b"
    shifted = ChatReplay("chat", relayed, ("stall_midstream", "no token"))
    out = [shifted.rewrite(c) for c in _chat([" a", " b c", " d"])]
    assert out[:2] == [None, None] and shifted.departed is None  # its role chunk, " a"
    got = [json.loads(c) for c in out[2:] if c is not None]
    assert [g["choices"][0]["delta"].get("content") for g in got if g["choices"]] == [" c", " d"]
    assert {g["id"] for g in got} == {json.loads(relayed[0])["id"]}
    assert got[-1]["usage"]["completion_tokens"] == 3  # the replay's own: it made the whole reply

    short = ChatReplay("chat", relayed, ("stall_midstream", "no token"))
    assert [short.rewrite(c) for c in _chat([" a"])][-1] is None
    assert short.departed is not None and "ended (stop)" in short.departed
    other = ChatReplay("chat", relayed, ("stall_midstream", "no token"))
    for c in _chat([" a", " x"]):
        other.rewrite(c)
    assert other.departed is not None and "departed" in other.departed
