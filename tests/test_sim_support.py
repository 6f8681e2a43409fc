"""Helpers shared by the simulator's test files (no tests here): a raw SSE stream held open
over a plain socket, and small readers of /sim/stats and /metrics."""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai

from wedgewatch.testing import eventually
from wedgewatch.wire.promtext import parse as parse_metrics
from wedgewatch.wire.sse import SSEEvent, SSEParser


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

    def pings(self) -> int:
        """SSE comments (the server's ``: ping``) received so far."""
        return sum(len(e.comments) for e in self.events)

    def read_until(self, done: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
        """Read, a tenth of a second at a time, until ``done()`` holds (``eventually``)."""

        def more() -> bool:
            self.read(0.1)
            return done()

        eventually(more, timeout=timeout, what=what)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
