"""A streaming load generator: C streams kept open against an OpenAI-compatible URL, one JSON line
of results on stdout. Run it as its own process (``python -m wedgewatch.bench.streams ...``) so its
CPU never competes inside the process under test.

Each stream sends one chat request after another (``stream: true`` with usage) and times every
token-bearing chunk as it arrives. Only what happens inside the measurement window counts: tokens
that arrive in it, TTFTs of requests that start in it, gaps between two tokens that both arrive
in it. It imports aiohttp and numpy only, to start fast and stay light per token.
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

_CONTENT = b'"content":"'


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


def _tokens(event: bytes) -> int:
    i = event.find(_CONTENT)
    return 1 if i >= 0 and event[i + len(_CONTENT) : i + len(_CONTENT) + 1] != b'"' else 0


async def _one(session: aiohttp.ClientSession, url: str, body: bytes, w: Window) -> None:
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
                if b'{"error"' in ev[:16]:
                    w.errors += 1
                    if len(w.error_samples) < 5:
                        w.error_samples.append(ev[:200].decode(errors="replace"))
                    continue
                if not _tokens(ev):
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


async def _stream(session: aiohttp.ClientSession, url: str, body: bytes, w: Window) -> None:
    while time.monotonic() < w.end:
        try:
            await _one(session, url, body, w)
        except (aiohttp.ClientError, OSError) as exc:
            w.errors += 1
            if len(w.error_samples) < 5:
                w.error_samples.append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(0.05)


def _pct(values: array[float], q: float) -> float | None:
    return float(np.percentile(np.frombuffer(values, dtype=np.float64), q)) if len(values) else None


async def run(
    url: str, concurrency: int, duration: float, warmup: float, max_tokens: int, model: str
) -> dict[str, Any]:
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Write a long story."}],
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.monotonic() + warmup
        w = Window(start, start + duration)
        tasks = [asyncio.create_task(_stream(session, url, body, w)) for _ in range(concurrency)]
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
    p.add_argument("--url", required=True, help="chat completions URL")
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--duration", type=float, default=3.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--model", default="sim-model")
    a = p.parse_args(argv)
    result = asyncio.run(run(a.url, a.concurrency, a.duration, a.warmup, a.max_tokens, a.model))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
