"""Scripted faults, observed from outside through real sockets."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from test_sim_support import Stream, chat_body, client, gauge, stats
from wedgewatch.testing import eventually
from wedgewatch.wire.promtext import parse as parse_metrics


def test_stall_ttft_holds_the_stream_and_a_disconnect_aborts(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "keywords", "--time-scale", "10")
    st = Stream(s.url, chat_body("STALL-TTFT please"))
    assert st.read() == "timeout"
    assert len(st.events) == 1 and st.events[0].json()["choices"][0]["delta"]["role"] == "assistant"
    assert st.content() == []
    assert stats(s.url)["in_flight"] == 1 and gauge(s.url, "vllm:num_requests_running") == 1
    st.close()
    eventually(lambda: stats(s.url)["aborted"] == 1)
    assert gauge(s.url, "vllm:num_requests_running") == 0
    m = parse_metrics(httpx.get(s.url + "/metrics").text)
    assert m.total("vllm:request_success_total", finished_reason="abort") == 1
    # a non-streaming request stalls the same way: no bytes at all
    with pytest.raises(openai.APITimeoutError):
        client(s.url, timeout=0.5).chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": "STALL-TTFT"}]
        )
    eventually(lambda: stats(s.url)["aborted"] == 2)


def test_stall_after_trickle_http_error_drop(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "keywords", "--time-scale", "10")
    st = Stream(s.url, chat_body("STALL-MID"))
    assert st.read() == "timeout" and len(st.content()) == 5
    st.close()

    t0 = time.monotonic()
    st = Stream(s.url, chat_body("TRICKLE", max_tokens=8))
    assert st.read() == "done" and len(st.content()) == 8
    took = time.monotonic() - t0
    # 8 tokens at 2 x 10 tokens/s take 0.35 s at least (healthy would take 0.02 s). The pace is the
    # subject, and only its lower bound is asserted: a busy machine can only add to it.
    assert took > 0.3
    st.close()

    c = client(s.url)
    with pytest.raises(openai.InternalServerError) as e500:
        c.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": "HTTP-500"}])
    assert e500.value.status_code == 500
    with pytest.raises(openai.APIStatusError) as e503:
        c.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": "HTTP-503"}])
    assert e503.value.status_code == 503

    got: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        for ch in c.chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": "DROP"}], max_tokens=20, stream=True
        ):
            if ch.choices and ch.choices[0].delta.content:
                got.append(ch.choices[0].delta.content)
    assert len(got) == 3
    eventually(lambda: stats(s.url)["dropped"] == 1)
    info = stats(s.url)
    assert info["http_errors"] == 2 and info["faults"]["trickle"] == 1 and info["completed"] == 1
    # the server itself is fine
    r = c.chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert r.choices[0].finish_reason == "length"


def test_crash_exits_with_the_code(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "keywords", "--time-scale", "10")
    st = Stream(s.url, chat_body("CRASH now"))
    assert st.read() in ("error", "eof")
    assert len(st.content()) == 2
    assert s.proc.wait(timeout=5) == 7
    st.close()


def test_pings_on_a_stalled_stream(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "stall-all", "--sse-ping-interval", "1", "--time-scale", "10")
    st = Stream(s.url, chat_body("anything"), read_timeout=2.0)
    # Read until three pings came (a busy machine delays them; a fixed 0.55 s window once saw
    # two), then check they came no faster than one every 0.1 s: the ping interval is the subject,
    # and a busy machine can only make the count per second lower.
    t0 = time.monotonic()
    st.read_until(lambda: st.pings() >= 3, what="three pings")
    elapsed = time.monotonic() - t0
    assert st.pings() <= elapsed / 0.1 + 2, f"{st.pings()} pings in {elapsed:.2f} s"
    assert st.content() == []
    st.close()


def _scenario(tmp_path: Path, text: str) -> str:
    p = tmp_path / "scenario.toml"
    p.write_text(text)
    return str(p)


def test_fault_conditions_nth_model_times(start_sim, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = _scenario(
        tmp_path,
        """
[[fault]]
when.nth = 2
action = "http_error"
status = 500

[[fault]]
when.model = "lora-a"
times = 1
action = "http_error"
status = 503
""",
    )
    s = start_sim("--scenario", path, "--time-scale", "20", "--enable-lora", "--lora-modules", "lora-a=/a")
    c = client(s.url)
    msgs = [{"role": "user", "content": "x"}]
    c.chat.completions.create(model="sim-model", messages=msgs, max_tokens=2)  # type: ignore[arg-type]
    with pytest.raises(openai.InternalServerError):
        c.chat.completions.create(model="sim-model", messages=msgs, max_tokens=2)  # type: ignore[arg-type]
    c.chat.completions.create(model="sim-model", messages=msgs, max_tokens=2)  # type: ignore[arg-type]
    with pytest.raises(openai.APIStatusError) as e:
        c.chat.completions.create(model="lora-a", messages=msgs, max_tokens=2)  # type: ignore[arg-type]
    assert e.value.status_code == 503
    c.chat.completions.create(model="lora-a", messages=msgs, max_tokens=2)  # type: ignore[arg-type]
    assert stats(s.url)["http_errors"] == 2 and stats(s.url)["completed"] == 3


def test_concurrent_streams_are_independent(start_sim) -> None:  # type: ignore[no-untyped-def]
    """A stall on one stream does not slow the others (one task per stream)."""
    s = start_sim("--scenario", "keywords", "--time-scale", "10")
    stuck = Stream(s.url, chat_body("STALL-TTFT"))
    results: list[int] = []

    def run() -> None:
        r = client(s.url).chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": "ok"}], max_tokens=50
        )
        results.append(r.usage.completion_tokens if r.usage else 0)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == [50] * 4
    stuck.close()


def test_queued_request_gets_pings_and_leaves_the_queue(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim(
        "--scenario", "stall-all", "--max-num-seqs", "1", "--sse-ping-interval", "1", "--time-scale", "10"
    )
    holder = Stream(s.url, chat_body("first"), read_timeout=2.0)
    eventually(lambda: gauge(s.url, "vllm:num_requests_running") == 1)  # the holder has the slot
    queued = Stream(s.url, chat_body("second"), read_timeout=2.0)
    queued.read_until(lambda: queued.pings() >= 2, what="pings while waiting for a slot")
    assert gauge(s.url, "vllm:num_requests_running") == 1 and gauge(s.url, "vllm:num_requests_waiting") == 1
    queued.close()
    eventually(lambda: gauge(s.url, "vllm:num_requests_waiting") == 0)
    assert stats(s.url)["aborted"] == 1 and gauge(s.url, "vllm:num_requests_running") == 1
    holder.close()


def test_disconnect_mid_stream_aborts_quietly_and_completions_meet_faults(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "keywords", "--time-scale", "2", "--preload-age", "40")
    st = Stream(s.url, chat_body("a long one", max_tokens=2000))
    assert st.read(0.3) == "busy" and st.content()
    st.close()
    eventually(lambda: stats(s.url)["aborted"] == 1)
    assert gauge(s.url, "vllm:num_requests_running") == 0
    with pytest.raises(openai.InternalServerError):
        client(s.url).completions.create(model="sim-model", prompt="please HTTP-500", max_tokens=3)
    info = stats(s.url)
    assert info["age_requests"] == 41 and info["by_path"] == {"/v1/chat/completions": 1, "/v1/completions": 1}
    assert "Traceback" not in s.log()


def _collect(url: str, path: str, body: dict[str, object], out: dict[str, object]) -> None:
    """POST ``body`` and keep the status, the bytes read and how the body ended ('eof', or the
    exception httpx raised on a cut)."""
    try:
        with httpx.stream("POST", url + path, json=body, timeout=30) as resp:
            out["status"] = resp.status_code
            data = b""
            for piece in resp.iter_raw():
                data += piece
                out["data"] = data
            out["end"] = "eof"
    except httpx.HTTPError as exc:
        out["end"] = type(exc).__name__


def test_an_engine_death_fails_every_request_as_vllm_then_the_process_exits(  # type: ignore[no-untyped-def]
    start_sim, tmp_path
) -> None:
    """vLLM's EngineDeadError (sim/death.py): every stream in flight gets the engine's error (chat:
    the error object and [DONE]; Messages: an error event; Responses: its connection cut), a
    request without a stream HTTP 500; /health says 503 and new requests 500 until the process
    exits with its code."""
    path = _scenario(
        tmp_path,
        '[server]\ntokens_per_s = 20\n\n[[fault]]\nwhen.contains = "ENGINE-DIES"\n'
        'action = "engine_death"\nafter_tokens = 3\nexit_code = 3\nexit_delay = 6.0\n',
    )
    s = start_sim("--scenario", path)
    long = {"model": "sim-model", "max_tokens": 400, "stream": True}
    user = [{"role": "user", "content": "write a long story"}]
    bodies = {
        "chat": ("/v1/chat/completions", {**long, "messages": user}),
        "once": ("/v1/chat/completions", {**long, "messages": user, "stream": False}),
        "messages": ("/v1/messages", {**long, "messages": user}),
        "responses": ("/v1/responses", {"model": "sim-model", "input": "write a long story", "stream": True}),
    }
    got: dict[str, dict[str, object]] = {k: {} for k in bodies}
    threads = [
        threading.Thread(target=_collect, args=(s.url, p, b, got[k]), daemon=True)
        for k, (p, b) in bodies.items()
    ]
    for t in threads:
        t.start()
    eventually(lambda: stats(s.url)["in_flight"] == len(bodies), what="every request in flight")
    struck = Stream(s.url, chat_body("ENGINE-DIES now", max_tokens=50))
    assert struck.read(until=30) == "done"
    chunks = [e.json() for e in struck.events if e.data and not e.is_done]
    errors = [c["error"] for c in chunks if "error" in c]
    assert [e["code"] for e in errors] == [500] and "error" in chunks[-1], chunks
    assert sum(1 for c in chunks[:-1] if c["choices"][0]["delta"].get("content")) == 3
    for t in threads:
        t.join(timeout=30)
    once = json.loads(bytes(got["once"]["data"]))  # type: ignore[arg-type]
    assert got["once"]["status"] == 500 and once["error"]["code"] == 500, got["once"]
    chat = bytes(got["chat"]["data"])  # type: ignore[arg-type]
    assert got["chat"]["end"] == "eof" and chat.endswith(b"data: [DONE]\n\n") and b'"code":500' in chat
    messages = bytes(got["messages"]["data"])  # type: ignore[arg-type]
    assert got["messages"]["end"] == "eof" and b"event: error" in messages
    assert got["responses"]["status"] == 200 and got["responses"]["end"] != "eof", got["responses"]
    # Dead, not gone yet: /health 503, a new request 500; then the exit.
    assert httpx.get(s.url + "/health", timeout=5).status_code == 503
    again = httpx.post(s.url + "/v1/chat/completions", json=chat_body("hello", stream=False), timeout=5)
    assert again.status_code == 500 and again.json()["error"]["code"] == 500
    assert s.proc.wait(timeout=60) == 3
    struck.close()
