"""``wedgewatch bench detection``, part two: the same checks on the real llama.cpp (xllamacpp,
bundled Gemma 3 270M) at the default windows, in real seconds. (a) A healthy prompt of about
2,800 tokens streamed through the stack: stalls and wedges are false alarms, and the longest
still stretch of the heartbeat is shown. (b) SIGSTOP during a long prompt and mid-stream, a few
times each: seconds from the last beat (or the last token) to the verdict and to the client's error.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp

from wedgewatch.base.events import Restarting, Stalled, Wedged
from wedgewatch.bench.detection import Watcher, chat, percentiles
from wedgewatch.config import ServerConfig, WarmupConfig, WatchdogConfig
from wedgewatch.stack.servers import Stack

MODEL = "gemma3-270m"
LONG = " ".join(f"item{i}" for i in range(700))  # about 2,800 tokens: many batches of 64


def make_stack(log_dir: Path, threads: int) -> Stack:
    cfg = ServerConfig(
        profile="llamacpp",
        launcher="xllamacpp",
        model=MODEL,
        args=["--parallel", "2", "--threads", str(threads), "--ctx-size", "8192"],
        log_dir=str(log_dir),
        warmup=WarmupConfig(count=1, max_tokens=4, timeout=60.0),
        startup_timeout=120.0,
        stop_grace=1.0,
        max_restarts=100,
        restart_backoff=0.5,
    )
    return Stack(cfg, WatchdogConfig())


async def _llama_chat(session: aiohttp.ClientSession, url: str, text: str, max_tokens: int) -> Any:
    # The bench's chat helper names the simulator's model; llama.cpp answers any model name the
    # same, but say what we mean.
    return await chat(session, url, text, max_tokens, 600.0)


async def run(log_dir: Path, threads: int, trials: int) -> dict[str, Any]:
    load = os.getloadavg()[0]
    stack = make_stack(log_dir, threads)
    w = Watcher()
    w.attach(stack)
    url = await stack.start()
    sup = stack.supervisor
    res: dict[str, Any] = {}
    stop: dict[str, dict[str, list[float]]] = {
        k: {"verdict": [], "client_error": []} for k in ("prompt", "midstream")
    }
    missed = {"prompt": 0, "midstream": 0}
    early = {"prompt": 0, "midstream": 0}  # a wedge verdict before the SIGSTOP: a false alarm
    try:
        async with aiohttp.ClientSession() as session:
            t0 = time.monotonic()
            r = await _llama_chat(session, url, LONG, 64)
            res["healthy"] = {
                "prompt_tokens": "about 2,800",
                "ok": r.status == 200 and bool(r.tokens),
                "first_token_s": round(r.tokens[0] - t0, 1) if r.tokens else None,
                "false_stalls": w.count(Stalled),
                "false_wedges": w.count(Wedged),
                "longest_still_heartbeat_s": round(w.max_still(), 2),
            }
            for _ in range(trials):
                for kind in ("prompt", "midstream"):
                    await sup.wait_ready()
                    life = sup._life
                    assert life is not None and life.proc.pid is not None
                    pid = life.proc.pid
                    t0 = time.monotonic()
                    text = LONG if kind == "prompt" else "Count from one to two hundred."
                    req = asyncio.ensure_future(_llama_chat(session, url, text, 400))
                    # Freeze it two beats into the prompt, or after a few tokens.
                    deadline = t0 + 120
                    while time.monotonic() < deadline and not req.done():
                        beats = {rd.beat for t, rd, _ in w.readings if t >= t0}
                        if (kind == "prompt" and len(beats) >= 3) or (
                            kind == "midstream" and len(beats) >= 4
                        ):
                            break
                        await asyncio.sleep(0.05)
                    if w.first(Wedged, t0) is not None:
                        early[kind] += 1
                        await req
                        continue
                    os.kill(pid, signal.SIGSTOP)
                    stopped = time.monotonic()
                    reply = await req
                    verdict = w.first(Wedged, t0)
                    last = (
                        w.last_beat(stopped, t0)
                        if kind == "prompt"
                        else (reply.tokens[-1] if reply.tokens else None)
                    )
                    if kind == "midstream" and reply.tokens and reply.tokens[-1] > stopped:
                        last = None
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
                    if verdict is None or last is None:
                        missed[kind] += 1
                        continue
                    stop[kind]["verdict"].append(verdict - last)
                    stop[kind]["client_error"].append(reply.ended - last)
                    while w.first(Restarting, t0) is None:
                        await asyncio.sleep(0.05)
    finally:
        await stack.stop()
    for kind, v in stop.items():
        res[f"sigstop_{kind}"] = {
            "verdict": percentiles(v["verdict"]),
            "client_error": percentiles(v["client_error"]),
            "missed": missed[kind],
            "false_before_stop": early[kind],
        }
    res["load_average"] = [round(load, 1), round(os.getloadavg()[0], 1)]
    return res
