"""A streaming load generator: C streams kept open against an OpenAI-compatible URL, one JSON line
of results on stdout. Run it as its own process (``python -m wedgewatch.bench.streams ...``) so its
CPU never competes inside the process under test.

Each stream sends one request after another (``stream: true``: chat completions with usage, or
the Responses API or Anthropic's Messages API with ``--api``) and times every token-bearing
event as it arrives. Only what happens inside the measurement window counts: tokens that arrive
in it, TTFTs of requests that start in it, gaps between two tokens that both arrive in it. It
imports aiohttp and numpy only, to start fast and stay light per token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from array import array
from typing import Any

import aiohttp
import numpy as np

# The key of a token-bearing event: chat's content, a Responses API delta event's delta, or the
# text of a Messages API text_delta (a text block's start carries an empty one).
_TOKEN_KEY = {"chat": b'"content":"', "responses": b'"delta":"', "messages": b'"text":"'}
_PATH = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}


class Window:
    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end
        self.tokens = 0
        self.tokens_total = 0  # warm-up and wind-down included: what the CPU counters also saw
        self.requests = 0
        self.errors = 0
        self.error_samples: list[str] = []
        self.ttft = array("d")
        self.itl = array("d")


def _tokens(event: bytes, key: bytes) -> int:
    i = event.find(key)
    return 1 if i >= 0 and event[i + len(key) : i + len(key) + 1] != b'"' else 0


def _is_error(event: bytes) -> bool:
    """A chat stream's ``data: {"error"`` line, or the ``error`` event of a Responses or Messages
    API stream."""
    return b'{"error"' in event[:16] or event.startswith(b"event: error")


async def _one(session: aiohttp.ClientSession, url: str, body: bytes, key: bytes, w: Window) -> None:
    t0 = time.monotonic()
    counted = w.start <= t0 < w.end
    last: float | None = None
    buf = b""
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        if r.status != 200:
            w.errors += 1
            if len(w.error_samples) < 5:
                w.error_samples.append(f"HTTP {r.status}: {(await r.read())[:200]!r}")
            return
        async for chunk in r.content.iter_any():
            now = time.monotonic()
            buf += chunk
            *events, buf = buf.split(b"\n\n")
            for ev in events:
                if _is_error(ev):
                    w.errors += 1
                    if len(w.error_samples) < 5:
                        w.error_samples.append(ev[:200].decode(errors="replace"))
                    continue
                if not _tokens(ev, key):
                    continue
                w.tokens_total += 1
                inside = w.start <= now < w.end
                if last is None:
                    if counted:
                        w.ttft.append(now - t0)
                elif inside and last >= w.start:
                    w.itl.append(now - last)
                if inside:
                    w.tokens += 1
                last = now
    if counted:
        w.requests += 1


async def _stream(session: aiohttp.ClientSession, url: str, body: bytes, key: bytes, w: Window) -> None:
    while time.monotonic() < w.end:
        before = w.errors
        try:
            await _one(session, url, body, key, w)
        except aiohttp.ClientPayloadError as exc:
            if w.errors == before:  # else a failed stream, cut short after its error event: counted
                w.errors += 1
                if len(w.error_samples) < 5:
                    w.error_samples.append(f"{type(exc).__name__}: {exc}")
        except (aiohttp.ClientError, OSError) as exc:
            w.errors += 1
            if len(w.error_samples) < 5:
                w.error_samples.append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(0.05)


def _pct(values: array[float], q: float) -> float | None:
    return float(np.percentile(np.frombuffer(values, dtype=np.float64), q)) if len(values) else None


def _body(api: str, model: str, max_tokens: int) -> bytes:
    prompt = "Write a long story."
    if api == "responses":
        return json.dumps(
            {"model": model, "input": prompt, "max_output_tokens": max_tokens, "stream": True}
        ).encode()
    if api == "messages":
        turn = [{"role": "user", "content": prompt}]
        return json.dumps(
            {"model": model, "messages": turn, "max_tokens": max_tokens, "stream": True}
        ).encode()
    chat = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return json.dumps(chat).encode()


async def run(
    url: str, concurrency: int, duration: float, warmup: float, max_tokens: int, model: str, api: str = "chat"
) -> dict[str, Any]:
    """``url`` is the server's (or proxy's) ``/v1`` root's parent: the API's path is added."""
    body, key, url = _body(api, model, max_tokens), _TOKEN_KEY[api], url.rstrip("/") + _PATH[api]
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.monotonic() + warmup
        w = Window(start, start + duration)
        tasks = [asyncio.create_task(_stream(session, url, body, key, w)) for _ in range(concurrency)]
        await asyncio.sleep(warmup + duration)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "concurrency": concurrency,
        "duration": duration,
        "tokens": w.tokens,
        "tokens_per_s": w.tokens / duration,
        "tokens_total": w.tokens_total,
        "requests": w.requests,
        "errors": w.errors,
        "error_samples": w.error_samples,
        "ttft_p50": _pct(w.ttft, 50),
        "ttft_p99": _pct(w.ttft, 99),
        "itl_p50": _pct(w.itl, 50),
        "itl_p99": _pct(w.itl, 99),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", required=True, help="the server's root URL (the API's path is added)")
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--duration", type=float, default=3.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--model", default="sim-model")
    p.add_argument("--api", choices=sorted(_PATH), default="chat")
    a = p.parse_args(argv)
    result = asyncio.run(run(a.url, a.concurrency, a.duration, a.warmup, a.max_tokens, a.model, a.api))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
