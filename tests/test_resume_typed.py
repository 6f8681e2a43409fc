"""A begun Responses or Messages stream continued from ids, piece by piece, without a server: what
the client has is read back (``typed_ids.Begun``), the continuation's generate chunks are
re-encoded as the client's events (``reencode.Reencoder``) and read by the API's own relay, and a
request whose continuation would not be exact is named (``typed_ids.inexact``). The events are the
simulator's encoders' (vLLM-shaped); tests/test_vllm_server.py holds the route to a real vLLM."""

from __future__ import annotations

import json
from typing import Any

import pytest

from wedgewatch.config import WatchdogConfig
from wedgewatch.proxy.deadlines import Watch
from wedgewatch.proxy.dialects import make_relay
from wedgewatch.proxy.dialects.typed import TypedRelay
from wedgewatch.proxy.resume.reencode import Reencoder
from wedgewatch.proxy.resume.typed_ids import Begun, inexact
from wedgewatch.sim.anthropic import AnthropicEncoder
from wedgewatch.sim.chunks import Reply, Unit
from wedgewatch.sim.responses import ResponsesEncoder
from wedgewatch.wire.sse import SSEEvent, SSEParser

WORDS = [" The", " cat", " sat", " on", " the", " mat", " and", " slept", "."]


def _events(raw: bytes) -> list[SSEEvent]:
    parser = SSEParser()
    return [e for e in parser.feed(raw) + parser.close() if e.data is not None]


def _stream(kind: str, units: list[Unit], finish: str = "stop") -> list[SSEEvent]:
    calls = [{"id": "call_1", "name": "f"}] if any(u.call >= 0 for u in units) else []
    reply = Reply(units, finish, None, calls)
    if kind == "responses":
        enc: Any = ResponsesEncoder("m", reply)
    else:
        enc = AnthropicEncoder("m", reply, 11)
    return _events(enc.role_chunk() + b"".join(enc.unit_chunks()) + enc.tail(11, len(units), True))


def _generate(pieces: list[str], finish: str, completion: int) -> list[SSEEvent]:
    """vLLM's ``/inference/v1/generate`` stream in text mode: a chunk per piece, the finish, the usage."""
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "text": p, "token_ids": [7], "finish_reason": None}], "output_mode": "text"}
        for p in pieces
    ]
    chunks[-1]["choices"][0].update(finish_reason=finish, stop_reason=None)
    chunks.append({"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": completion}})
    raw = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    return _events(raw)


def _relay(kind: str, sent: list[bytes]) -> TypedRelay:
    """The relay of the continuing leg, as the resume sets it up: what the client has, kept."""
    relay = make_relay(kind, Watch(WatchdogConfig(), 0.0, None))  # type: ignore[arg-type]
    assert isinstance(relay, TypedRelay)
    relay.sent = list(sent)
    return relay


@pytest.mark.parametrize("kind", ["responses", "messages"])
def test_a_text_reply_cut_midway_is_continued_as_the_clients_own_events(kind: str) -> None:
    whole = _stream(kind, [Unit("content", w) for w in WORDS])
    cut = 4
    texts = [i for i, e in enumerate(whole) if b"delta" in (e.data or b"") and b"text" in (e.data or b"")]
    sent = [e.data or b"" for e in whole[: texts[cut - 1] + 1]]  # the client read four words
    begun = Begun.read(kind, sent)  # type: ignore[arg-type]
    assert begun.blocker is None and begun.text == "".join(WORDS[:cut])
    begun.prompt_tokens, begun.text_tokens = 11, cut
    relay = _relay(kind, sent)
    relay.source = Reencoder(begun)
    frames = relay.frames(_generate(WORDS[cut:], "stop", len(WORDS) - cut), 1.0, True, True)
    assert relay.fault is None and relay.done and relay.error is None
    got = [json.loads(e.data or b"") for e in _events(b"".join(frames))]
    client = [json.loads(d) for d in sent] + got
    if kind == "responses":
        deltas = "".join(g["delta"] for g in client if g["type"] == "response.output_text.delta")
        assert [g["sequence_number"] for g in client] == list(range(len(client)))
        final = client[-1]["response"]
        assert client[-1]["type"] == "response.completed" and final["status"] == "completed"
        assert final["output"][0]["content"][0]["text"] == deltas == "".join(WORDS)
        item = next(g["item"]["id"] for g in client if g["type"] == "response.output_item.added")
        assert {g["item_id"] for g in got if "item_id" in g} == {item} == {final["output"][0]["id"]}
        assert final["id"] == client[0]["response"]["id"]
        assert final["usage"]["output_tokens"] == len(WORDS) and final["usage"]["input_tokens"] == 11
        # The same event kinds, in the same order, as the stream never cut.
        assert [g["type"] for g in client] == [json.loads(e.data or b"")["type"] for e in whole]
    else:
        deltas = "".join(g["delta"]["text"] for g in client if g["type"] == "content_block_delta")
        assert deltas == "".join(WORDS)
        assert [g["type"] for g in got[-3:]] == ["content_block_stop", "message_delta", "message_stop"]
        assert got[-2]["delta"]["stop_reason"] == "end_turn"
        assert got[-2]["usage"]["output_tokens"] == len(WORDS)
        assert {g["index"] for g in got if "index" in g} == {0}
    assert relay.sent is not None and len(relay.sent) == len(client)  # kept for a further resume


def test_a_continuation_cut_by_its_token_budget_is_incomplete_as_vllm_says_it() -> None:
    whole = _stream("responses", [Unit("content", w) for w in WORDS])
    sent = [e.data or b"" for e in whole[:6]]
    begun = Begun.read("responses", sent)
    begun.prompt_tokens, begun.text_tokens = 11, 2
    relay = _relay("responses", sent)
    relay.source = Reencoder(begun)
    frames = relay.frames(_generate([" sat"], "length", 1), 1.0, True, True)
    final = json.loads(_events(b"".join(frames))[-1].data or b"")["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert relay.finish == "max_output_tokens"


@pytest.mark.parametrize(
    ("kind", "units", "why"),
    [
        ("responses", [Unit("reasoning", " hmm"), Unit("content", " hi")], "not one message"),
        ("responses", [Unit("tool_head", "f", 0), Unit("tool_args", '{"a": 1}', 0)], "not one message"),
        ("messages", [Unit("tool_head", "f", 0), Unit("tool_args", '{"a": 1}', 0)], "not text"),
    ],
)
def test_what_is_not_text_alone_is_left_to_replay(kind: str, units: list[Unit], why: str) -> None:
    whole = _stream(kind, units)
    begun = Begun.read(kind, [e.data or b"" for e in whole[:-2]])  # type: ignore[arg-type]
    assert begun.blocker is not None and why in begun.blocker


@pytest.mark.parametrize(
    ("kind", "body", "why"),
    [
        ("chat", {"response_format": {"type": "json_schema", "json_schema": {}}}, "grammar"),
        ("responses", {"text": {"format": {"type": "json_schema"}}}, "grammar"),
        ("chat", {"structured_outputs": {"regex": "a+"}}, "grammar"),
        ("chat", {"frequency_penalty": 0.5}, "unpenalised"),
        ("completion", {"presence_penalty": -1.0}, "unpenalised"),
        ("responses", {"seed": 7}, "random state"),
    ],
)
def test_what_a_continuation_would_not_give_exactly_is_named(
    kind: str, body: dict[str, Any], why: str
) -> None:
    said = inexact(kind, body)  # type: ignore[arg-type]
    assert said is not None and why in said
    assert inexact(kind, {"response_format": {"type": "text"}, "frequency_penalty": 0, "seed": None}) is None  # type: ignore[arg-type]
