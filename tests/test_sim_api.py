"""The simulator's OpenAI surface, checked with the real OpenAI SDK as the client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import openai
import pytest

from wedgewatch.testing import eventually
from wedgewatch.wire.promtext import parse as parse_metrics

FAST = ("--time-scale", "50")


def client(url: str, **kw: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0, timeout=10, **kw)  # type: ignore[arg-type]


def metrics(url: str):  # type: ignore[no-untyped-def]
    return parse_metrics(httpx.get(url + "/metrics", timeout=5).text)


def stats(url: str) -> dict[str, object]:
    out: dict[str, object] = httpx.get(url + "/sim/stats", timeout=5).json()
    return out


USER = [{"role": "user", "content": "Tell me about simulators."}]


def test_chat_non_streaming_and_streaming(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim(*FAST)
    c = client(s.url)
    r = c.chat.completions.create(model="sim-model", messages=USER, max_tokens=12)  # type: ignore[arg-type]
    assert r.object == "chat.completion"
    assert r.choices[0].finish_reason == "length"
    assert r.usage is not None and r.usage.completion_tokens == 12
    assert r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + 12
    text = r.choices[0].message.content or ""
    assert len(text) > 12

    chunks = list(
        c.chat.completions.create(
            model="sim-model",
            messages=USER,
            max_completion_tokens=7,
            stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        )
    )
    first, last = chunks[0], chunks[-1]
    assert first.choices[0].delta.role == "assistant" and not first.choices[0].delta.content
    assert last.choices == [] and last.usage is not None and last.usage.completion_tokens == 7
    body = chunks[1:-1]
    assert len(body) == 7 and all(ch.choices[0].delta.content for ch in body)
    assert body[-1].choices[0].finish_reason == "length"
    assert (
        "".join(ch.choices[0].delta.content or "" for ch in body)
        == text[: len("".join(ch.choices[0].delta.content or "" for ch in body))]
    )

    # no limit: the filler stops by itself, and without include_usage no usage chunk is sent
    chunks = list(c.chat.completions.create(model="sim-model", messages=USER, stream=True))  # type: ignore[arg-type]
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].usage is None

    st = stats(s.url)
    assert st["received"] == 3 and st["completed"] == 3 and st["in_flight"] == 0
    m = metrics(s.url)
    assert m.total("vllm:generation_tokens_total", model_name="sim-model") == 12 + 7 + 64
    assert m.total("vllm:request_success_total", finished_reason="length") == 2
    assert m.total("vllm:request_success_total", finished_reason="stop") == 1
    assert m.total("vllm:prompt_tokens_total") == 3 * r.usage.prompt_tokens


def test_completions_and_stop_strings(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim(*FAST)
    c = client(s.url)
    r = c.completions.create(model="sim-model", prompt="Once upon a time", max_tokens=20)
    assert r.choices[0].finish_reason == "length" and r.usage is not None and r.usage.completion_tokens == 20
    full = r.choices[0].text
    stop_word = full.split()[5]
    r2 = c.completions.create(model="sim-model", prompt="Once upon a time", max_tokens=20, stop=[stop_word])
    assert r2.choices[0].finish_reason == "stop"
    assert r2.choices[0].text == full[: full.index(stop_word)]
    pieces = list(
        c.completions.create(model="sim-model", prompt="Once upon a time", max_tokens=20, stream=True)
    )
    assert "".join(p.choices[0].text for p in pieces) == full
    assert pieces[-1].choices[0].finish_reason == "length"
    # the chat endpoint honours stop too
    chat = c.chat.completions.create(model="sim-model", messages=USER, max_tokens=20)  # type: ignore[arg-type]
    word = (chat.choices[0].message.content or "").split()[3]
    chat2 = c.chat.completions.create(model="sim-model", messages=USER, max_tokens=20, stop=word)  # type: ignore[arg-type]
    assert chat2.choices[0].finish_reason == "stop" and word not in (chat2.choices[0].message.content or "")


def test_errors_bad_body_unknown_model_context_limit(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim(*FAST, "--max-model-len", "100")
    c = client(s.url)
    with pytest.raises(openai.NotFoundError) as nf:
        c.chat.completions.create(model="nope", messages=USER)  # type: ignore[arg-type]
    assert "nope" in str(nf.value)
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="sim-model", messages=[])
    with pytest.raises(openai.BadRequestError) as ctx:
        c.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": "word " * 200}])
    assert "maximum context length is 100 tokens" in str(ctx.value)
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="sim-model", messages=USER, max_tokens=95)  # type: ignore[arg-type]
    raw = httpx.post(s.v1 + "/chat/completions", content=b"{not json", timeout=5)
    assert raw.status_code == 400
    err = raw.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == 400
    assert stats(s.url)["received"] == 0 and stats(s.url)["rejected"] == 5


def test_the_responses_api_streamed_and_whole(start_sim) -> None:  # type: ignore[no-untyped-def]
    """``/v1/responses`` as vLLM serves it: typed events framed with ``event:`` lines and
    numbered, output items opened and closed around their deltas, ``response.completed`` with the
    whole response and its usage; a conversation of items, function tools, and its errors."""
    s = start_sim(*FAST, "--max-model-len", "400")
    c = client(s.url)
    whole = c.responses.create(
        model="sim-model", instructions="Be brief.", input="Tell me.", max_output_tokens=9
    )
    assert whole.status == "incomplete" and whole.incomplete_details is not None
    assert whole.incomplete_details.reason == "max_output_tokens"
    assert whole.usage is not None and whole.usage.output_tokens == 9 and len(whole.output_text) > 9
    events = list(
        c.responses.create(model="sim-model", instructions="Be brief.", input="Tell me.", stream=True)
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]  # type: ignore[union-attr]
    final = events[-1].response  # type: ignore[union-attr]
    assert len(deltas) == 64 and final.usage is not None and final.usage.output_tokens == 64
    assert final.output_text == "".join(deltas) and final.output_text.startswith(whole.output_text)
    raw = httpx.post(
        s.v1 + "/responses", json={"model": "sim-model", "input": "x", "stream": True}, timeout=10
    )
    frames = [f for f in raw.text.split("\n\n") if f]
    assert all(f.split("\n")[0] == "event: " + json.loads(f.split("\n")[1][6:])["type"] for f in frames)

    # A conversation of items: the function call and its output are read as the chat turns they are.
    tools = [{"type": "function", "name": "list_files", "parameters": {"type": "object", "properties": {}}}]
    turn = [{"role": "user", "content": [{"type": "input_text", "text": "Please call list_files."}]}]
    called = c.responses.create(model="sim-model", input=turn, tools=tools)  # type: ignore[arg-type]
    (call,) = called.output
    assert call.type == "function_call" and call.name == "list_files" and call.arguments == "{}"
    history = [
        *turn,
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": "{}"},
    ]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "a.py b.py"})
    after = c.responses.create(model="sim-model", input=history, tools=tools, max_output_tokens=5)  # type: ignore[arg-type]
    assert after.output[0].type == "message"  # the last turn is the tool's output: no new call
    assert after.usage is not None and after.usage.input_tokens > called.usage.input_tokens  # type: ignore[union-attr]

    with pytest.raises(openai.BadRequestError) as bad:
        c.responses.create(model="sim-model", input=[{"type": "web_search_call"}])  # type: ignore[list-item]
    assert "input[0]" in str(bad.value)
    with pytest.raises(openai.BadRequestError) as long:
        c.responses.create(model="sim-model", input="word " * 500)
    assert "maximum context length is 400 tokens" in str(long.value)
    m = metrics(s.url)
    call_tokens = called.usage.output_tokens  # type: ignore[union-attr]
    assert call_tokens == 3  # the name, then "{" and "}"
    assert m.total("vllm:generation_tokens_total", model_name="sim-model") == 9 + 64 + 64 + call_tokens + 5


def test_the_messages_api_streamed_and_whole(start_sim) -> None:  # type: ignore[no-untyped-def]
    """Anthropic's ``/v1/messages`` as vLLM and llama.cpp serve it: ``message_start`` with the
    input usage, blocks started, filled by deltas and stopped, ``message_delta`` with the stop
    reason and output usage, ``message_stop``; tool use and tool results; its errors."""
    import anthropic

    s = start_sim(*FAST, "--max-model-len", "400")
    c = anthropic.Anthropic(base_url=s.url, api_key="sk-test", max_retries=0, timeout=10)
    user = [{"role": "user", "content": "Tell me."}]
    whole = c.messages.create(model="sim-model", system="Be brief.", max_tokens=9, messages=user)  # type: ignore[arg-type]
    assert whole.stop_reason == "max_tokens" and whole.usage.output_tokens == 9
    assert whole.content[0].type == "text" and len(whole.content[0].text) > 9
    raw = httpx.post(
        s.v1 + "/messages", json={"model": "sim-model", "max_tokens": 64, "messages": user, "stream": True}
    )
    frames = [f.split("\n") for f in raw.text.split("\n\n") if f]
    events = [(f[0].removeprefix("event: "), json.loads(f[1].removeprefix("data: "))) for f in frames]
    assert all(name == data["type"] for name, data in events)
    kinds = [name for name, _ in events]
    assert kinds[:2] == ["message_start", "content_block_start"] and kinds[-3:] == [
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert kinds.count("content_block_delta") == 64 == events[-2][1]["usage"]["output_tokens"]
    plain = c.messages.create(model="sim-model", max_tokens=1, messages=user)  # type: ignore[arg-type]
    assert events[0][1]["message"]["usage"]["input_tokens"] == plain.usage.input_tokens
    assert whole.usage.input_tokens > plain.usage.input_tokens  # the system prompt counts

    tools = [
        {"name": "list_files", "description": "List", "input_schema": {"type": "object", "properties": {}}}
    ]
    turn = [{"role": "user", "content": [{"type": "text", "text": "Please call list_files."}]}]
    called = c.messages.create(model="sim-model", max_tokens=50, messages=turn, tools=tools)  # type: ignore[arg-type]
    (use,) = called.content
    assert use.type == "tool_use" and use.name == "list_files" and use.input == {}
    assert called.stop_reason == "tool_use"
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "a.py b.py"}
    history = [*turn, {"role": "assistant", "content": called.content}, {"role": "user", "content": [result]}]
    after = c.messages.create(model="sim-model", max_tokens=5, messages=history, tools=tools)  # type: ignore[arg-type]
    assert after.content[0].type == "text"  # the last turn is the tool's result: no new call
    assert after.usage.input_tokens > called.usage.input_tokens

    with pytest.raises(anthropic.BadRequestError) as bad:
        c.messages.create(model="sim-model", max_tokens=5, messages=[{"role": "system", "content": "x"}])  # type: ignore[list-item]
    assert "messages[0]" in str(bad.value)
    with pytest.raises(anthropic.BadRequestError) as long:
        c.messages.create(
            model="sim-model", max_tokens=5, messages=[{"role": "user", "content": "word " * 500}]
        )
    assert "maximum context length is 400 tokens" in str(long.value)


def test_models_version_health_and_lora(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim(
        *FAST,
        "--model",
        "org/base-7b",
        "--served-model-name",
        "base",
        "--enable-lora",
        "--lora-modules",
        "lora-a=/adapters/a",
        "lora-b=/adapters/b",
        "--gpu-memory-utilization",
        "0.9",
        "--trust-remote-code",  # vLLM flags we ignore
    )
    assert httpx.get(s.url + "/health", timeout=5).status_code == 200
    assert "version" in httpx.get(s.url + "/version", timeout=5).json()
    c = client(s.url)
    listed = {m.id: m for m in c.models.list().data}
    assert set(listed) == {"base", "lora-a", "lora-b"}
    extra = listed["lora-a"].model_extra or {}
    assert extra["parent"] == "base" and extra["root"] == "/adapters/a"
    assert (listed["base"].model_extra or {})["root"] == "org/base-7b"
    r = c.chat.completions.create(model="lora-b", messages=USER, max_tokens=3)  # type: ignore[arg-type]
    assert r.model == "lora-b" and r.choices[0].finish_reason == "length"
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="org/base-7b", messages=USER, max_tokens=3)  # type: ignore[arg-type]
    assert metrics(s.url).total("vllm:generation_tokens_total", model_name="base") == 3


def test_lora_needs_enable_lora(start_sim, tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "sim", "--port", "0", "--lora-modules", "a=/x"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2 and "--enable-lora" in p.stderr


WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]


def test_tool_calls_streamed_and_whole(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim(*FAST)
    c = client(s.url)
    ask = [{"role": "user", "content": "Please call get_weather for Paris."}]
    r = c.chat.completions.create(model="sim-model", messages=ask, tools=WEATHER)  # type: ignore[arg-type]
    call = r.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert r.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {
        "city": "filler",
        "days": 1,
    }  # type: ignore[union-attr]

    pieces = list(c.chat.completions.create(model="sim-model", messages=ask, tools=WEATHER, stream=True))  # type: ignore[arg-type]
    frags = [tc for p in pieces if p.choices for tc in (p.choices[0].delta.tool_calls or [])]
    assert frags[0].id == call.id and frags[0].function and frags[0].function.name == "get_weather"  # type: ignore[union-attr]
    assert len(frags) > 3 and all(f.index == 0 for f in frags)
    args = "".join(f.function.arguments or "" for f in frags if f.function)
    assert json.loads(args) == {"city": "filler", "days": 1}
    assert pieces[-1].choices[0].finish_reason == "tool_calls"
    # tools offered but not asked for: plain text
    plain = c.chat.completions.create(model="sim-model", messages=USER, tools=WEATHER, max_tokens=5)  # type: ignore[arg-type]
    assert not plain.choices[0].message.tool_calls and plain.choices[0].finish_reason == "length"


def test_queue_and_time_scale(start_sim) -> None:  # type: ignore[no-untyped-def]
    """--time-scale shortens timings; --max-num-seqs makes the rest wait (num_requests_waiting)."""
    slow = start_sim("--time-scale", "2", "--max-num-seqs", "1")  # 100 tokens/s
    fast = start_sim("--time-scale", "20")  # 1000 tokens/s
    t0 = time.monotonic()
    client(fast.url).chat.completions.create(model="sim-model", messages=USER, max_tokens=100)  # type: ignore[arg-type]
    t_fast = time.monotonic() - t0

    import threading

    done: list[float] = []

    def one() -> None:
        client(slow.url).chat.completions.create(model="sim-model", messages=USER, max_tokens=100)  # type: ignore[arg-type]
        done.append(time.monotonic())

    t0 = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    # one slot: the second request waits for the first's whole generation
    eventually(lambda: metrics(slow.url).total("vllm:num_requests_waiting") == 1, what="one waiting")
    for t in threads:
        t.join(10)
    t_slow = max(done) - t0
    assert len(done) == 2
    # The pace is the subject: two 1 s generations back to back take 2 s at least (a busy machine
    # can only add to it), and the same request at 10 times the scale is much faster than them.
    assert t_slow > 1.9
    assert t_fast < t_slow / 2


def test_help_names_every_flag() -> None:
    env = dict(os.environ, COLUMNS="200", TERMINAL_WIDTH="200")
    out = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "sim", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    ).stdout
    for flag in (
        "--host",
        "--port",
        "--scenario",
        "--time-scale",
        "--max-num-seqs",
        "--model",
        "--served-model-name",
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--enable-lora",
        "--lora-modules",
        "--max-model-len",
        "--sse-ping-interval",
        "--seed",
        "--policy",
        "--preload-age",
    ):
        assert flag in out, flag
