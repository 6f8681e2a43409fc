"""What the real llama.cpp server does here, measured: readiness, speed, and its behaviour under
the events wedgewatch cares about (a busy server's /health, pings, a client leaving, a freeze,
SIGTERM). ``wedgewatch bench llamacpp`` prints these; docs/real-servers.md quotes them."""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from wedgewatch.launchers.llamacpp import launch_argv
from wedgewatch.wire import promtext
from wedgewatch.wire.sse import SSEParser

HELLO = [{"role": "user", "content": "Write hello world."}]


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str
    ready_s: float


@dataclass
class Stream:
    started: float
    ttft: float | None = None
    tokens: int = 0
    ended: float | None = None
    pings: list[float] = field(default_factory=list)  # seconds since the start
    error: str | None = None

    def rate(self) -> float:
        if self.ttft is None or self.ended is None or self.tokens < 2:
            return 0.0
        return (self.tokens - 1) / max(1e-9, self.ended - self.started - self.ttft)


async def spawn(log: Path, **kw: Any) -> Server:
    t0 = time.monotonic()
    proc = subprocess.Popen(
        launch_argv(**kw), stdout=subprocess.PIPE, stderr=log.open("w"), text=True, start_new_session=True
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 120)
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"launcher said {line!r}; see {log}")
    return Server(proc, line.strip().removeprefix("listening on "), time.monotonic() - t0)


def kill(server: Server) -> None:
    if server.proc.poll() is None:
        os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait()


async def stream(
    s: aiohttp.ClientSession, url: str, body: dict[str, Any], stop_after: int | None = None
) -> tuple[Stream, aiohttp.ClientResponse]:
    """Read a chat stream; with ``stop_after`` return (response still open) after that many tokens."""
    st = Stream(time.monotonic())
    resp = await s.post(url + "/v1/chat/completions", json={**body, "stream": True})
    parser = SSEParser()
    try:
        async for chunk in resp.content.iter_any():
            now = time.monotonic() - st.started
            for ev in parser.feed(chunk):
                if ev.data is None:
                    st.pings.append(now)
                elif not ev.is_done and _content(ev.json()):
                    st.ttft = now if st.ttft is None else st.ttft
                    st.tokens += 1
            if stop_after is not None and st.tokens >= stop_after:
                return st, resp
    except aiohttp.ClientPayloadError as exc:
        st.error = type(exc).__name__
    st.ended = time.monotonic()
    return st, resp


def _content(obj: Any) -> bool:
    choices = obj.get("choices") if isinstance(obj, dict) else None
    return bool(choices and (choices[0].get("delta") or {}).get("content"))


async def metric(s: aiohttp.ClientSession, url: str, name: str) -> float:
    async with s.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as r:
        return promtext.parse(await r.text()).total(name) or 0.0


async def health(s: aiohttp.ClientSession, url: str, timeout: float) -> tuple[int | None, float]:
    t0 = time.monotonic()
    try:
        async with s.get(url + "/health", timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            return r.status, time.monotonic() - t0
    except (TimeoutError, aiohttp.ClientError):
        return None, time.monotonic() - t0


async def speed(s: aiohttp.ClientSession, srv: Server, tokens: int, parallel: int) -> dict[str, Any]:
    body = {"messages": HELLO, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    one, _ = await stream(s, srv.url, body)
    checks: list[tuple[int | None, float]] = []

    async def poll_health(done: asyncio.Event) -> None:
        while not done.is_set():
            checks.append(await health(s, srv.url, 5))
            await asyncio.sleep(0.25)

    done = asyncio.Event()
    poller = asyncio.create_task(poll_health(done))
    t0 = time.monotonic()
    many = await asyncio.gather(*(stream(s, srv.url, body) for _ in range(parallel)))
    wall = time.monotonic() - t0
    done.set()
    await poller
    return {
        "one_stream_tokens_per_s": round(one.rate(), 1),
        "one_stream_ttft_s": round(one.ttft or 0, 3),
        f"{parallel}_streams_total_tokens_per_s": round(sum(m.tokens for m, _ in many) / wall, 1),
        f"{parallel}_streams_per_stream_tokens_per_s": round(statistics.mean(m.rate() for m, _ in many), 1),
        "health_while_busy": sorted({c[0] for c in checks}, key=str),
        "health_while_busy_max_ms": round(max(c[1] for c in checks) * 1000, 1) if checks else None,
    }


async def cancellation(s: aiohttp.ClientSession, srv: Server) -> dict[str, Any]:
    body = {"messages": HELLO, "max_tokens": 2000, "temperature": 0, "ignore_eos": True}
    _, resp = await stream(s, srv.url, body, stop_after=10)
    t0 = time.monotonic()
    resp.close()
    while await metric(s, srv.url, "llamacpp:requests_processing") and time.monotonic() - t0 < 10:
        await asyncio.sleep(0.02)
    stopped = time.monotonic() - t0
    first = await metric(s, srv.url, "llamacpp:n_decode_total")
    await asyncio.sleep(1)
    return {
        "disconnect_to_idle_s": round(stopped, 3),
        "decodes_after_idle": await metric(s, srv.url, "llamacpp:n_decode_total") - first,
    }


async def pings_and_freeze(s: aiohttp.ClientSession, srv: Server) -> dict[str, Any]:
    prompt = " ".join(f"item{i}" for i in range(450))  # about 1,800 tokens of prefill
    long_prefill, _ = await stream(
        s, srv.url, {"messages": [{"role": "user", "content": prompt}], "max_tokens": 4, "temperature": 0}
    )
    pid = srv.proc.pid
    body = {"messages": HELLO, "max_tokens": 2000, "temperature": 0, "ignore_eos": True}
    _, resp = await stream(s, srv.url, body, stop_after=10)
    os.kill(pid, signal.SIGSTOP)
    try:
        got = b""
        try:
            got = await asyncio.wait_for(resp.content.read(4096), 3)
        except TimeoutError:
            pass
        frozen_health = await health(s, srv.url, 2)
    finally:
        os.kill(pid, signal.SIGCONT)
    resumed = bool(await asyncio.wait_for(resp.content.read(256), 10))
    resp.close()
    return {
        "prefill_tokens_per_s": round(1800 / (long_prefill.ttft or 1), 0),
        "pings_before_first_token": len([p for p in long_prefill.pings if p < (long_prefill.ttft or 0)]),
        "ping_times_s": [round(p, 2) for p in long_prefill.pings],
        "bytes_in_3s_while_stopped": len(got),
        "health_while_stopped": frozen_health[0],
        "stream_resumes_after_sigcont": resumed,
    }


async def sigterm(s: aiohttp.ClientSession, srv: Server) -> dict[str, Any]:
    body = {"messages": HELLO, "max_tokens": 2000, "temperature": 0, "ignore_eos": True}
    _, resp = await stream(s, srv.url, body, stop_after=5)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    error = "none"
    try:
        async for _ in resp.content.iter_any():
            pass
    except aiohttp.ClientPayloadError as exc:
        error = type(exc).__name__
    client_s = time.monotonic() - t0
    code = await asyncio.to_thread(srv.proc.wait, 30)
    return {
        "sigterm_mid_stream_exit_s": round(time.monotonic() - t0, 3),
        "sigterm_exit_code": code,
        "client_sees": error,
        "client_stream_ended_s": round(client_s, 3),
    }


async def run(workdir: Path, threads: int, tokens: int, parallel: int) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"threads": threads, "tokens": tokens, "parallel": parallel, "cpus": os.cpu_count()}
    out["load_avg_1m_before"] = round(os.getloadavg()[0], 2)  # other work on the CPU skews every figure
    a = await spawn(workdir / "a.log", parallel=parallel, threads=threads, ctx_size=4096)
    b: Server | None = None
    try:
        # force_close: llama.cpp may close a connection after a stream; never reuse one.
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
            out["ready_s"] = round(a.ready_s, 2)
            out |= await speed(s, a, tokens, parallel)
            out |= await cancellation(s, a)
            b = await spawn(
                workdir / "b.log", parallel=1, threads=threads, ctx_size=4096, sse_ping_interval=1
            )
            out["ready_s_second"] = round(b.ready_s, 2)
            out |= await pings_and_freeze(s, b)
            out |= await sigterm(s, b)
    finally:
        kill(a)
        if b is not None:
            kill(b)
    out["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    out["python"] = sys.version.split()[0]
    return out
