"""Scripted faults, start-up behaviour and the wedge, observed from outside through real sockets."""

from __future__ import annotations

import json
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from wedgewatch.promtext import parse as parse_metrics
from wedgewatch.sse import SSEEvent, SSEParser


def client(url: str, **kw: Any) -> openai.OpenAI:
    kw.setdefault("max_retries", 0)
    kw.setdefault("timeout", 10)
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", **kw)


def stats(url: str) -> dict[str, Any]:
    out: dict[str, Any] = httpx.get(url + "/sim/stats", timeout=5).json()
    return out


def gauge(url: str, name: str) -> float:
    v = parse_metrics(httpx.get(url + "/metrics", timeout=5).text).total(name)
    assert v is not None, name
    return v


def chat_body(text: str, max_tokens: int = 20, stream: bool = True) -> dict[str, Any]:
    return {
        "model": "sim-model",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


class Stream:
    """A raw SSE stream over a plain socket, held open by the test.

    A reader thread collects bytes, so waiting for a quiet stream never closes it (httpx closes
    the connection on a read timeout, which the simulator would rightly count as an abort).
    """

    def __init__(self, url: str, body: dict[str, Any], read_timeout: float = 0.5) -> None:
        u = urlsplit(url)
        assert u.hostname is not None and u.port is not None
        self.sock = socket.create_connection((u.hostname, u.port), timeout=5)
        self.sock.settimeout(None)
        payload = json.dumps(body).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {u.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + payload)
        self.quiet = read_timeout
        self.q: queue.Queue[bytes | None] = queue.Queue()
        self.buf = b""
        self.status = 0
        self.headers_done = False
        self.parser = SSEParser()
        self.events: list[SSEEvent] = []
        self.end = ""
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self) -> None:
        try:
            while True:
                b = self.sock.recv(65536)
                self.q.put(b)
                if not b:
                    return
        except OSError:
            self.q.put(None)

    def _consume(self, data: bytes) -> bool:
        """Decode HTTP framing; True once the chunked body has ended."""
        self.buf += data
        if not self.headers_done:
            at = self.buf.find(b"\r\n\r\n")
            if at < 0:
                return False
            self.status = int(self.buf.split(b" ", 2)[1])
            self.buf = self.buf[at + 4 :]
            self.headers_done = True
        while True:
            nl = self.buf.find(b"\r\n")
            if nl < 0:
                return False
            size = int(self.buf[:nl].split(b";")[0], 16)
            if len(self.buf) < nl + 2 + size + 2:
                return False
            chunk = self.buf[nl + 2 : nl + 2 + size]
            self.buf = self.buf[nl + 4 + size :]
            if size == 0:
                return True
            self.events += self.parser.feed(chunk)

    def read(self, until: float = 5.0) -> str:
        """Read until the stream ends ('done'), the peer closes ('eof') or resets ('error'), it goes
        quiet for ``read_timeout`` ('timeout'), or ``until`` passes with data still coming ('busy')."""
        start = last = time.monotonic()
        deadline = start + until
        while True:
            now = time.monotonic()
            wait = min(deadline, last + self.quiet) - now
            if wait <= 0:
                if now - last >= self.quiet - 1e-3:
                    self.end = "timeout"
                    return self.end
                return "busy"
            try:
                data = self.q.get(timeout=wait)
            except queue.Empty:
                continue
            last = time.monotonic()
            if data is None:
                self.end = "error"
                return self.end
            if not data:
                self.end = "eof"
                return self.end
            if self._consume(data) or any(e.is_done for e in self.events):
                self.end = "done"
                return self.end

    def content(self) -> list[str]:
        out = []
        for e in self.events:
            if e.data and not e.is_done:
                ch = e.json()
                if ch["choices"] and ch["choices"][0]["delta"].get("content"):
                    out.append(ch["choices"][0]["delta"]["content"])
        return out

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def wait_for(pred: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_stall_ttft_holds_the_stream_and_a_disconnect_aborts(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "keywords", "--time-scale", "10")
    st = Stream(s.url, chat_body("STALL-TTFT please"))
    assert st.read() == "timeout"
    assert len(st.events) == 1 and st.events[0].json()["choices"][0]["delta"]["role"] == "assistant"
    assert st.content() == []
    assert stats(s.url)["in_flight"] == 1 and gauge(s.url, "vllm:num_requests_running") == 1
    st.close()
    wait_for(lambda: stats(s.url)["aborted"] == 1)
    assert gauge(s.url, "vllm:num_requests_running") == 0
    m = parse_metrics(httpx.get(s.url + "/metrics").text)
    assert m.total("vllm:request_success_total", finished_reason="abort") == 1
    # a non-streaming request stalls the same way: no bytes at all
    with pytest.raises(openai.APITimeoutError):
        client(s.url, timeout=0.5).chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": "STALL-TTFT"}]
        )
    wait_for(lambda: stats(s.url)["aborted"] == 2)


def test_stall_after_trickle_http_error_drop(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "keywords", "--time-scale", "10")
    st = Stream(s.url, chat_body("STALL-MID"))
    assert st.read() == "timeout" and len(st.content()) == 5
    st.close()

    t0 = time.monotonic()
    st = Stream(s.url, chat_body("TRICKLE", max_tokens=8))
    assert st.read() == "done" and len(st.content()) == 8
    took = time.monotonic() - t0
    assert 0.3 < took < 2.0  # 8 tokens at 2 x 10 tokens/s: 0.35 s (healthy would take 0.02 s)
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
    wait_for(lambda: stats(s.url)["dropped"] == 1)
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


def test_scripted_wedge_freezes_tokens_but_not_health(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "keywords", "--time-scale", "2")  # 100 tokens/s
    long = Stream(s.url, chat_body("a long answer", max_tokens=2000))
    assert long.read(0.3) == "busy" and long.content()
    wedge = Stream(s.url, chat_body("WEDGE"))
    assert wedge.read() == "timeout" and len(wedge.content()) == 3
    assert long.read(1.0) == "timeout"  # the healthy stream froze too
    info = stats(s.url)
    assert info["wedged"] and info["wedge_cause"] == "scripted"
    before = gauge(s.url, "vllm:generation_tokens_total")
    late = Stream(s.url, chat_body("a new request"))
    assert late.read(0.6) == "timeout" and late.content() == []
    for path in ("/health", "/version", "/v1/models"):
        assert httpx.get(s.url + path, timeout=5).status_code == 200
    time.sleep(0.3)
    assert gauge(s.url, "vllm:generation_tokens_total") == before
    assert gauge(s.url, "vllm:num_requests_running") == 2
    # clients giving up do not unfreeze the engine's gauges
    for st in (long, wedge, late):
        st.close()
    wait_for(lambda: stats(s.url)["in_flight"] == 0)
    assert gauge(s.url, "vllm:num_requests_running") == 2


def test_stochastic_wedge_under_load(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "wedge-under-load", "--time-scale", "5", "--seed", "1")
    c = client(s.url)
    r = c.chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "one"}], max_tokens=10
    )
    assert r.choices[0].finish_reason == "length" and not stats(s.url)["wedged"]
    streams = [Stream(s.url, chat_body(f"load {i}", max_tokens=400)) for i in range(3)]
    for st in streams:
        st.read(0.2)
    wait_for(lambda: stats(s.url)["wedged"], timeout=5)
    assert stats(s.url)["wedge_cause"] == "stochastic"
    time.sleep(0.2)
    before = gauge(s.url, "vllm:generation_tokens_total")
    time.sleep(0.5)
    assert gauge(s.url, "vllm:generation_tokens_total") == before
    assert gauge(s.url, "vllm:num_requests_running") > 0
    assert httpx.get(s.url + "/health", timeout=5).status_code == 200
    for st in streams:
        assert st.read(2.0) == "timeout"  # drains what came before the wedge, then silence
        st.close()


def test_pings_on_a_stalled_stream(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "stall-all", "--sse-ping-interval", "1", "--time-scale", "10")
    st = Stream(s.url, chat_body("anything"), read_timeout=2.0)
    st.read(0.55)
    pings = sum(len(e.comments) for e in st.events)
    assert 3 <= pings <= 6  # one every 0.1 s
    assert st.content() == []
    st.close()


def test_the_sdk_retry_trap(start_sim) -> None:  # type: ignore[no-untyped-def]
    """Default max_retries=2 against a stalled server: 3 requests, about 3 x timeout, then an error."""
    s = start_sim("--scenario", "stall-all")
    timeout = 1.0
    c = openai.OpenAI(base_url=s.v1, api_key="sk-test", timeout=timeout)  # max_retries left at 2
    t0 = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        c.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": "fix the bug"}])
    took = time.monotonic() - t0
    assert 3 * timeout < took < 3 * timeout + 3.0  # + two backoffs of 0.4-1 s each
    wait_for(lambda: stats(s.url)["aborted"] == 3)
    info = stats(s.url)
    assert info["received"] == 3 and info["by_path"] == {"/v1/chat/completions": 3}


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


def test_unready_startup(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "unready", "--time-scale", "5")  # 1 s unready
    assert httpx.get(s.url + "/health", timeout=5).status_code == 503
    r = httpx.post(s.v1 + "/chat/completions", json=chat_body("x", stream=False), timeout=5)
    assert r.status_code == 503 and r.json()["error"]["code"] == 503
    wait_for(lambda: httpx.get(s.url + "/health", timeout=5).status_code == 200, timeout=5)
    assert httpx.get(s.url + "/health", timeout=5).json() == {}


def test_exit_at_start_and_bad_scenario(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "sim", "--port", "0", "--scenario", "exit-at-start"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 3 and p.stdout == ""
    bad = tmp_path / "bad.toml"
    bad.write_text('[[fault]]\naction = "explode"\n')
    p = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "sim", "--port", "0", "--scenario", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "fault[0].action" in lines[0]
    bad.write_text("[startup]\nunready_seconds = -1\n")
    p = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "sim", "--port", "0", "--scenario", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2 and "startup.unready_seconds" in p.stderr


def test_sigterm_exits_cleanly_unless_ignored(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "stall-all")
    hold = Stream(s.url, chat_body("stuck"))  # a stalled request must not block the exit
    hold.read(0.3)
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=5) == 0
    hold.close()
    stubborn = start_sim("--scenario", "ignore-sigterm")
    stubborn.proc.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        stubborn.proc.wait(timeout=0.7)
    assert httpx.get(stubborn.url + "/health", timeout=5).status_code == 200
    stubborn.proc.send_signal(signal.SIGINT)
    assert stubborn.proc.wait(timeout=5) == 0


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
