"""``wedgewatch bench detection``: the heartbeat rules at their default windows, on the simulator.

(a) A healthy mixed workload through the supervised stack (proxy, supervisor, simulator): short
requests from many clients, more than the server runs at once (queueing at the cap), and 60 s
prefills from two clients of their own, whose KV pushes short requests out (preemptions). Every
stall, wedge or restart is a false alarm. (b) Each wedge kind, many times: the whole engine
stopping during a prefill, the whole engine stopping mid-stream, and one request stuck while the
engine serves another; seconds from the last beat (or the last token) to the verdict and to the
client's error. Every window is its default divided by the simulator's time scale, so the
figures are the server's seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from wedgewatch.base.events import Event, Restarting, Stalled, Wedged
from wedgewatch.config import ServerConfig, WarmupConfig, WatchdogConfig
from wedgewatch.stack.servers import Stack
from wedgewatch.wire import promtext
from wedgewatch.wire.heartbeat import Reading

SHORT_PROMPT = 2000  # tokens: one prefill chunk and a bit, 2 s at the scenario's 1,000 tokens/s
LONG_PROMPT = 60_000  # tokens: a 60 s prefill
SHORT_REPLY = 16


def windows(scale: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """The default windows in wall seconds at ``scale``; none selects the old rules."""
    s, w = ServerConfig(), WatchdogConfig()
    server = {
        "heartbeat_window": s.heartbeat_window / scale,
        "scrape_interval": s.scrape_interval / scale,
        "canary_timeout": s.canary_timeout / scale,
    }
    watchdog = {
        "engine_ttft_timeout": w.engine_ttft_timeout / scale,
        "engine_stall_timeout": w.engine_stall_timeout / scale,
        "total_timeout": w.total_timeout / scale,
        "rate_window": w.rate_window / scale,
        "min_rate": w.min_rate * scale,
    }
    return server, watchdog


def make_stack(log_dir: Path, scenario: str, scale: float) -> Stack:
    server, watchdog = windows(scale)
    cfg = ServerConfig(
        profile="sim",
        scenario=scenario,
        time_scale=scale,
        args=["--max-model-len", "131072"],
        log_dir=str(log_dir),
        startup_timeout=60.0,
        stop_grace=2.0,
        restart_backoff=0.1,
        max_restarts=1000,
        warmup=WarmupConfig(count=1, timeout=30.0),
        **server,
    )
    return Stack(cfg, WatchdogConfig(**watchdog))


@dataclass
class Watcher:
    """Everything the stack says, with the monotonic time it arrived."""

    events: list[tuple[float, Event]] = field(default_factory=list)
    readings: list[tuple[float, Reading, str | None]] = field(default_factory=list)

    def attach(self, stack: Stack) -> None:
        stack.bus.subscribe(lambda ev: self.events.append((time.monotonic(), ev)))
        stack.supervisor.feed.subscribe(
            lambda r, life: self.readings.append((time.monotonic(), r, life)), lambda *_: None
        )

    def count(self, kind: type[Event]) -> int:
        return sum(1 for _, e in self.events if isinstance(e, kind))

    def first(self, kind: type[Event], after: float) -> float | None:
        return next((t for t, e in self.events if isinstance(e, kind) and t >= after), None)

    def last_beat(self, before: float, after: float) -> float | None:
        """When the engine last moved (heartbeat or tokens) between two scrapes, before ``before``."""
        rs = [(t, r, life) for t, r, life in self.readings if after <= t <= before]
        moved = [t for (_, a, la), (t, b, lb) in itertools.pairwise(rs) if la == lb and b.moved_since(a)]
        return moved[-1] if moved else None

    def max_still(self) -> float:
        """The longest stretch between movements of the engine while it had work (wall seconds)."""
        worst, since = 0.0, None
        for (_, a, la), (t, b, lb) in itertools.pairwise(self.readings):
            if la != lb or not b.has_work() or b.moved_since(a):
                since = t
                continue
            since = since or t
            worst = max(worst, t - since)
        return worst


@dataclass
class Reply:
    status: int = 0
    tokens: list[float] = field(default_factory=list)
    error: str = ""
    ended: float = 0.0


async def chat(session: aiohttp.ClientSession, url: str, text: str, max_tokens: int, timeout: float) -> Reply:
    out = Reply()
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": True,
    }
    try:
        async with session.post(
            url + "/v1/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as resp:
            out.status = resp.status
            async for line in resp.content:
                if resp.status != 200 or b'"error"' in line:
                    out.error += line.decode("utf-8", "replace")
                elif line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
                    out.tokens.append(time.monotonic())
    except (TimeoutError, aiohttp.ClientError) as exc:
        out.error = out.error or f"{type(exc).__name__}: {exc}"
    out.ended = time.monotonic()
    return out


def prompt(tokens: int, word: str = "") -> str:
    return word + " " + "x " * tokens


def percentiles(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    v = sorted(values)

    def q(p: float) -> float:
        return v[min(len(v) - 1, max(0, math.ceil(p * len(v)) - 1))]

    return {"n": len(v), "p50": round(q(0.5), 2), "p99": round(q(0.99), 2), "max": round(v[-1], 2)}


async def healthy(log_dir: Path, scale: float, requests: int, longs: int, clients: int) -> dict[str, Any]:
    """(a): false alarms on a healthy mixed workload."""
    stack = make_stack(log_dir, "detection", scale)
    w = Watcher()
    w.attach(stack)
    url = await stack.start()
    counts = {"short": 0, "long": 0, "ok": 0, "failed": 0}
    waited_max = long_max = 0.0
    shorts = itertools.count()
    t0 = time.monotonic()
    timeout = 3 * WatchdogConfig().total_timeout / scale + 5 * LONG_PROMPT / 1000 / scale

    async def short_client(session: aiohttp.ClientSession) -> None:
        nonlocal waited_max
        while (i := next(shorts)) < requests:
            sent = time.monotonic()
            # A word of its own first: no prefix-cache hit, so every prompt takes its KV.
            r = await chat(session, url, prompt(SHORT_PROMPT, f"short{i}"), SHORT_REPLY, timeout)
            counts["short"] += 1
            counts["ok" if r.status == 200 and len(r.tokens) == SHORT_REPLY else "failed"] += 1
            if r.tokens:
                waited_max = max(waited_max, (r.tokens[0] - sent) * scale)

    async def long_client(session: aiohttp.ClientSession, n: int, who: int) -> None:
        nonlocal long_max
        for j in range(n):
            sent = time.monotonic()
            r = await chat(session, url, prompt(LONG_PROMPT, f"long{who}-{j}"), SHORT_REPLY, timeout)
            counts["long"] += 1
            if r.tokens:
                long_max = max(long_max, (r.tokens[0] - sent) * scale)
            counts["ok" if r.status == 200 and len(r.tokens) == SHORT_REPLY else "failed"] += 1

    try:
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn) as session:
            jobs = [short_client(session) for _ in range(clients)]
            jobs += [long_client(session, longs // 2 + (i < longs % 2), i) for i in range(2)]
            await asyncio.gather(*jobs)
            async with session.get(stack.supervisor.base_url + "/metrics") as resp:
                metrics = promtext.parse(await resp.text())
    finally:
        await stack.stop()
    return {
        "requests": counts["short"] + counts["long"],
        "prefills_60s": counts["long"],
        "ok": counts["ok"],
        "failed": counts["failed"],
        "false_stalls": w.count(Stalled),
        "false_wedges": w.count(Wedged),
        "restarts": w.count(Restarting),
        "preemptions": int(metrics.total("vllm:num_preemptions_total") or 0),
        "max_waiting": int(max((r.waiting or 0) for _, r, _ in w.readings)),
        "longest_short_first_token_s": round(waited_max, 1),
        "longest_long_first_token_s": round(long_max, 1),
        "longest_still_heartbeat_s": round(w.max_still() * scale, 2),
        "server_seconds": round((time.monotonic() - t0) * scale, 1),
    }


async def wedges(log_dir: Path, scale: float, trials: int) -> dict[str, Any]:
    """(b): each wedge kind ``trials`` times; seconds (server) to the verdict and to the error."""
    stack = make_stack(log_dir, "detection", scale)
    w = Watcher()
    w.attach(stack)
    url = await stack.start()
    out: dict[str, dict[str, list[float]]] = {
        k: {"verdict": [], "client_error": [], "missed": []} for k in ("prefill", "midstream", "stuck")
    }
    restarts_for_stuck = 0
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(trials):
                for kind in ("prefill", "midstream", "stuck"):
                    await stack.supervisor.wait_ready()
                    t0 = time.monotonic()
                    res = out[kind]
                    if kind == "prefill":
                        r = await chat(session, url, prompt(30_000, "WEDGE-PREFILL"), 20, 120.0)
                        verdict = w.first(Wedged, t0)
                        last = w.last_beat(verdict or r.ended, t0)
                    elif kind == "midstream":
                        r = await chat(session, url, "WEDGE now", 100, 120.0)
                        verdict = w.first(Wedged, t0)
                        last = r.tokens[-1] if r.tokens else None
                    else:
                        busy = asyncio.ensure_future(chat(session, url, "busy", 3000, 120.0))
                        await asyncio.sleep(0.5 / scale)
                        r = await chat(session, url, "STUCK here", 100, 120.0)
                        verdict = w.first(Stalled, t0)
                        last = r.tokens[-1] if r.tokens else None
                        busy.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await busy
                        restarts_for_stuck += sum(
                            1 for t, e in w.events if isinstance(e, Restarting) and t >= t0
                        )
                    if verdict is None or last is None or not r.error:
                        res["missed"].append(1.0)
                        continue
                    res["verdict"].append((verdict - last) * scale)
                    res["client_error"].append((r.ended - last) * scale)
    finally:
        await stack.stop()
    table: dict[str, Any] = {}
    for kind, res in out.items():
        table[kind] = {
            "verdict": percentiles(res["verdict"]),
            "client_error": percentiles(res["client_error"]),
            "missed": len(res["missed"]),
        }
    table["stuck"]["restarts"] = restarts_for_stuck
    return table


async def run(
    log_dir: Path, scale: float, requests: int, longs: int, clients: int, trials: int
) -> dict[str, Any]:
    return {
        "time_scale": scale,
        "healthy": await healthy(log_dir / "healthy", scale, requests, longs, clients),
        "wedges": await wedges(log_dir / "wedges", scale, trials),
    }
