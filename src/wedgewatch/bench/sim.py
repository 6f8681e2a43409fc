"""``wedgewatch bench sim``: a quick load test of the simulator itself, C streams of N tokens at
the given rate.

    wedgewatch bench sim --streams 64 --tokens 256 --rate 200

Starts a simulator subprocess (healthy scenario, ``--time-scale rate/50``), keeps ``streams``
streaming chat requests open (each stream sends ``rounds`` requests back to back), and reports
tokens/s, TTFT and inter-token latency seen by an aiohttp client, and the simulator's CPU use.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any

import aiohttp

from wedgewatch.wire.sse import SSEParser


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _one_stream(
    session: aiohttp.ClientSession, url: str, tokens: int, rounds: int, ttft: list[float], gaps: list[float]
) -> int:
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "load"}],
        "max_tokens": tokens,
        "stream": True,
    }
    got = 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        last = None
        parser = SSEParser()
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            async for chunk in resp.content.iter_any():
                now = time.perf_counter()
                for ev in parser.feed(chunk):
                    if ev.data is None or ev.is_done or b'"content":""' in ev.data:
                        continue
                    got += 1
                    if last is None:
                        ttft.append(now - t0)
                    else:
                        gaps.append(now - last)
                    last = now
    return got


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def run_load(url: str, streams: int, tokens: int, rounds: int) -> dict[str, Any]:
    ttft: list[float] = []
    gaps: list[float] = []
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as s:
        t0 = time.perf_counter()
        counts = await asyncio.gather(
            *(_one_stream(s, url, tokens, rounds, ttft, gaps) for _ in range(streams))
        )
        elapsed = time.perf_counter() - t0
    total = sum(counts)
    return {
        "streams": streams,
        "tokens_per_request": tokens,
        "rounds": rounds,
        "tokens": total,
        "elapsed_s": round(elapsed, 3),
        "tokens_per_s": round(total / elapsed, 1),
        "ideal_tokens_per_s": None,
        "ttft_p50_ms": round(_pct(ttft, 0.5) * 1e3, 2),
        "itl_p50_ms": round(_pct(gaps, 0.5) * 1e3, 2),
        "itl_p99_ms": round(_pct(gaps, 0.99) * 1e3, 2),
    }


def run(streams: int, tokens: int, rate: float, rounds: int) -> dict[str, Any]:
    """Start a simulator subprocess, load it, and return the figures (JSON-ready)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wedgewatch",
            "sim",
            "--port",
            "0",
            "--time-scale",
            str(rate / 50.0),
            "--max-num-seqs",
            str(max(streams, 1)),
            "--max-model-len",
            "100000",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip().removeprefix("listening on ")
        cpu0, t0 = _cpu_seconds(proc.pid), time.perf_counter()
        out = asyncio.run(run_load(url, streams, tokens, rounds))
        cpu = _cpu_seconds(proc.pid) - cpu0
        wall = time.perf_counter() - t0
        out["ideal_tokens_per_s"] = streams * rate
        out["sim_cpu_share_of_one_core"] = round(cpu / wall, 3)
        out["sim_cpu_us_per_token"] = round(cpu / max(out["tokens"], 1) * 1e6, 1)
        return out
    finally:
        proc.terminate()
        proc.wait(10)
