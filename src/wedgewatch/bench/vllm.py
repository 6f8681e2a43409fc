"""A real vLLM (the CPU build, bundled Gemma 3 270M, the seed's ``hybrid-safe`` flags) wedged the
four ways it really wedges, behind the supervisor and the proxy at their default settings.
``wedgewatch bench vllm`` prints the median of a few trials; docs/benchmarks.md quotes them.

One trial: a supervised server (start to ready, warm-up included; one stream's tokens/s), then
SIGSTOP of the EngineCore, SIGSTOP of the Worker and SIGKILL of the EngineCore mid-stream, each
followed by the next ready life; then a second server with ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS``
below the heartbeat window, whose stopped Worker vLLM itself gives up on (an SSE error event).
For each wedge: seconds from the act to the client's release, and to the next ready life.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam

from wedgewatch.base.events import EventBus
from wedgewatch.config import ServerConfig, WarmupConfig, WatchdogConfig
from wedgewatch.launchers import vllm_env
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.supervisor import Supervisor

MODEL = "gemma3-270m"
HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Write hello world."}]
TIMEOUT_ENV = "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"
EXECUTE_TIMEOUT = "4"
"""vLLM's default is 300 s, where the heartbeat (8 s) always speaks first; 4 s lets vLLM's own
timeout end a stopped Worker's step, the fourth way it wedges."""
NEXT_LIFE_LIMIT = 600.0
WEDGES = ("sigstop_engine_core", "sigstop_worker", "sigkill_engine_core", "execute_model_timeout")


def role_pid(pgid: int, title: str) -> int:
    """The pid in process group ``pgid`` whose command line vLLM titled ``title``."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            fields = (proc / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and cmdline.startswith(title):
            return int(proc.name)
    raise RuntimeError(f"no {title} in process group {pgid}")


class Rig:
    """One supervisor and its proxy, at default settings but for the log directory and the
    proxy's ``on_wedge``."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.ledger = Ledger(workdir / "ledger.sqlite")
        self.bus = EventBus()
        cfg = ServerConfig(
            profile="vllm",
            launcher="vllm-cpu",
            model=MODEL,
            arg_sets=["hybrid-safe"],
            log_dir=str(workdir / "logs"),
            env=env,
            warmup=WarmupConfig(count=1, max_tokens=4),
        )
        self.sup = Supervisor(cfg, ledger=self.ledger, bus=self.bus)
        # on_wedge = "fail": the client is released with an error, and the release is measured;
        # the default, "resume", holds it and continues its stream on the next life instead.
        watchdog = WatchdogConfig(on_wedge="fail")
        self.proxy = Proxy(self.sup, watchdog, ledger=self.ledger, bus=self.bus, feed=self.sup.feed)
        self._detach: Callable[[], None] = lambda: None

    async def start(self) -> float:
        t0 = time.monotonic()
        await self.sup.start()
        ready = time.monotonic() - t0
        self._detach = self.sup.attach(self.bus)
        await self.proxy.start()
        return ready

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.proxy.url + "/v1", api_key="x", max_retries=0, timeout=300)

    async def speed(self, tokens: int) -> float:
        """Tokens/s of one stream after its first token, through the proxy."""
        stream = await self.client().chat.completions.create(
            model=MODEL,
            messages=HELLO,
            max_tokens=tokens,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        times = [time.monotonic() async for c in stream if c.choices and c.choices[0].delta.content]
        return (len(times) - 1) / max(1e-9, times[-1] - times[0])

    async def wedge(self, title: str, sig: int) -> dict[str, Any]:
        """Signal ``title`` after a few chunks of a long stream: seconds to the client's release,
        to the next ready life, and what the client and the ledger saw."""
        await self.sup.wait_ready()
        life = self.sup.current
        assert life is not None and life.proc.pid is not None
        target = role_pid(life.proc.pid, title)
        stream = await self.client().chat.completions.create(
            model=MODEL,
            messages=HELLO,
            max_tokens=4000,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        chunks, acted, error = 0, 0.0, "none"
        try:
            async for _ in stream:
                chunks += 1
                if chunks == 5:
                    os.kill(target, sig)
                    acted = time.monotonic()
        except openai.APIError as exc:
            error = (
                str(exc.body.get("code") if isinstance(exc.body, dict) else exc)[:80] or type(exc).__name__
            )
        released = time.monotonic() - acted
        while self.sup.life_id in (None, life.life_id):
            await asyncio.sleep(0.1)
            if time.monotonic() - acted > NEXT_LIFE_LIMIT:
                raise RuntimeError(f"no new life {NEXT_LIFE_LIMIT:g}s after the {title} wedge")
        await self.sup.wait_ready()
        next_life = time.monotonic() - acted
        [row] = self.ledger.query(
            "SELECT outcome FROM requests WHERE life_id = ? AND client_stream = 1 "
            "ORDER BY started_at DESC LIMIT 1",  # the wedged stream: the last on its life
            (life.life_id,),
        )
        [ended] = self.ledger.query(
            "SELECT end_reason FROM server_life_view WHERE life_id = ?", (life.life_id,)
        )
        return {
            "release_s": round(released, 2),
            "next_ready_s": round(next_life, 2),
            "client_error": error,
            "request_outcome": row["outcome"],
            "end_reason": ended["end_reason"],
        }

    async def stop(self) -> None:
        self._detach()
        await self.proxy.stop()
        await self.sup.stop()
        self.ledger.close()


async def trial(workdir: Path, tokens: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rig = Rig(workdir / "a", {})
    try:
        out["ready_s"] = round(await rig.start(), 2)
        out["tokens_per_s"] = round(await rig.speed(tokens), 1)
        out["sigstop_engine_core"] = await rig.wedge("VLLM::EngineCore", signal.SIGSTOP)
        out["sigstop_worker"] = await rig.wedge("VLLM::Worker", signal.SIGSTOP)
        out["sigkill_engine_core"] = await rig.wedge("VLLM::EngineCore", signal.SIGKILL)
    finally:
        await rig.stop()
    timed = Rig(workdir / "b", {TIMEOUT_ENV: EXECUTE_TIMEOUT})
    try:
        await timed.start()
        out["execute_model_timeout"] = await timed.wedge("VLLM::Worker", signal.SIGSTOP)
    finally:
        await timed.stop()
    return out


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def summarise(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the trials, and every trial's figures beside them."""
    out: dict[str, Any] = {
        "trials": len(trials),
        "ready_s": _median([t["ready_s"] for t in trials]),
        "tokens_per_s": _median([t["tokens_per_s"] for t in trials]),
    }
    for kind in WEDGES:
        runs = [t[kind] for t in trials]
        out[kind] = {
            "release_s": _median([r["release_s"] for r in runs]),
            "next_ready_s": _median([r["next_ready_s"] for r in runs]),
            "client_error": sorted({r["client_error"] for r in runs}),
            "request_outcome": sorted({r["request_outcome"] for r in runs}),
            "end_reason": sorted({r["end_reason"] for r in runs}),
        }
    out["each"] = trials
    return out


async def run(workdir: Path, trials: int, tokens: int) -> dict[str, Any]:
    await asyncio.to_thread(vllm_env.ensure_model)  # a first run installs vLLM (minutes) first
    load_before = round(os.getloadavg()[0], 2)
    results = [await trial(workdir / f"t{n}", tokens) for n in range(trials)]
    out = summarise(results)
    out["load_avg_1m"] = [load_before, round(os.getloadavg()[0], 2)]
    out["vllm"] = vllm_env.VLLM_CPU_VERSION
    return out
