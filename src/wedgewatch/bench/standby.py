"""``wedgewatch bench standby``: one engine (arm ``one``), one engine with a spare
(``server.standby = 1``, arm ``one+spare``), and a pool of two engines on the same device (``pool``),
each struck by one wedge mid-run.

Each trial is the stack at its defaults (``on_wedge = "resume"``) and a harness on the OpenAI SDK
(its default client): ``tasks`` streamed chat requests at temperature 0, ``concurrency`` at a time,
each tagged. The wedge strikes the request of the task that starts once the first ``concurrency``
are under way, a few tokens in: on the simulator a scenario fault with a marker (it strikes once
across lives and members); on vLLM's CPU build a SIGSTOP of the EngineCore serving it (frozen, as
a wedged engine is). Per arm:

- ``lost``: tasks whose request raised;
- ``wait``: for each request the wedge struck, from the supervisor's verdict to the first token of
  its next leg (the proxy's resume): what a struck request waits for the next life;
- ``serving``: from the verdict to the next life serving (a spare promoted, a fresh life ready;
  none for a pool, whose other member was serving all along);
- ``tokens/s``: the harness's completion tokens over its wall-clock (on a CPU split between two
  engines, what the second engine adds or costs);
- ``memory``: each engine's proportional set size (PSS, GB) while the harness runs, before the
  strike (vLLM only: the simulator holds no model).

On vLLM's CPU build the pool's two members are bound to the two halves of the CPUs, as the spare
and the serving engine are (``VLLM_CPU_OMP_THREADS_BIND``); the single engine has them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

from wedgewatch.base import vocab
from wedgewatch.base.events import Event, Promoted, ServerReady, Wedged
from wedgewatch.bench import procfs
from wedgewatch.config import ServerConfig, WarmupConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.stack.servers import Stack
from wedgewatch.supervisor import Supervisor
from wedgewatch.supervisor.room import BIND_ENV, Machine
from wedgewatch.testing import eventually_async

ARMS = ("one", "one+spare", "pool")
"""One engine; one engine with a spare (``server.standby = 1``); a pool of two on one device."""
ENGINES = ("sim", "vllm-cpu")
STRIKE_AFTER = 5
"""Chunks of the struck request relayed before the strike."""
REACTION_WAIT = 600.0
"""Seconds a trial waits, once its harness is done, for the verdict and a serving life (a hang
guard: a real vLLM's cold start here took up to 4 minutes on a loaded machine)."""


@dataclass
class Trial:
    arm: str
    engine: str
    tasks: int
    lost: int = 0
    struck: int = 0
    wait: list[float] = field(default_factory=list)
    serving: float | None = None
    tokens_per_s: float = 0.0
    memory_gb: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _servers(arm: str, engine: str, workdir: Path, fault: Path | None) -> list[ServerConfig]:
    base: dict[str, Any] = {"log_dir": str(workdir / "logs"), "warmup": WarmupConfig(count=1, max_tokens=8)}
    if engine == "sim":
        base |= {"profile": "sim", "scenario": str(fault)}
    else:
        base |= {
            "profile": "vllm",
            "launcher": "vllm-cpu",
            "model": "gemma3-270m",
            "arg_sets": ["hybrid-safe"],
        }
    if arm == ARMS[1]:
        return [ServerConfig(**base, standby=1)]
    if arm == "one":
        return [ServerConfig(**base)]
    cpus = Machine.read().cpus
    half = len(cpus) // 2
    halves = [cpus[:half], cpus[half:]] if engine != "sim" and half else [(), ()]
    return [
        ServerConfig(**base, name=f"s{i}", env={BIND_ENV: ",".join(map(str, h))} if h else {})
        for i, h in enumerate(halves)
    ]


def _scenario(workdir: Path, tag: str) -> Path:
    path = workdir / "wedge.toml"
    path.write_text(
        f'[[fault]]\nwhen.contains = "{tag}:"\naction = "wedge"\nafter_tokens = 3\nmarker = "{workdir / "struck"}"\n'
    )
    return path


def _engine_core(pgid: int) -> int | None:
    for pid in procfs.group_pids(pgid):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if title.startswith(b"VLLM::EngineCore"):
            return pid
    return None


def _groups(stack: Stack) -> list[int]:
    """The process groups of every live life: the members' current lives and any spare."""
    out = []
    for m in stack.pool.members:
        lives = [m.current, m.standby.spare if m.standby is not None else None]
        out += [lv.proc.pid for lv in lives if lv is not None and lv.proc.pid is not None and not lv.ended]
    return out


async def _task(
    client: openai.AsyncOpenAI, model: str, tag: str, tokens: int, on_chunk: Callable[[int], None]
) -> tuple[int, str]:
    """One streamed request; (completion tokens, "" or the error that lost it)."""
    text = f"{tag}: count from 1 to {tokens}, one number per line."
    n = 0
    try:
        stream = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": text}],
            max_tokens=tokens,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"x-wedgewatch-tag": tag},
        )
        used: int | None = None
        async with stream:
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    n += 1
                    on_chunk(n)
                if chunk.usage is not None:
                    used = chunk.usage.completion_tokens
        if used is not None:
            return used, ""
    except openai.OpenAIError as exc:
        return 0, f"{type(exc).__name__}: {str(exc)[:200]}"
    return 0, "the stream ended without its usage"


async def trial(workdir: Path, arm: str, engine: str, tasks: int, concurrency: int, tokens: int) -> Trial:
    """One trial of ``arm`` on ``engine`` in ``workdir`` (a fresh directory)."""
    struck_tag = f"task-{concurrency:02d}"
    fault = _scenario(workdir, struck_tag) if engine == "sim" else None
    model = "sim-model" if engine == "sim" else "gemma3-270m"
    out = Trial(arm, engine, tasks)
    events: list[Event] = []
    ledger = Ledger(workdir / "ledger.sqlite")
    stopped: list[int] = []
    try:
        stack = Stack(_servers(arm, engine, workdir, fault), WatchdogConfig(), ledger=ledger)
        stack.bus.subscribe(events.append)
        async with stack:
            await _spares_ready(stack)
            client = openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key="bench")

            def on_chunk(tag: str, n: int) -> None:
                if tag != struck_tag or n != STRIKE_AFTER:
                    return
                out.memory_gb = (
                    [round(procfs.group_pss_gb(g), 2) for g in _groups(stack)] if engine != "sim" else []
                )
                if engine != "sim":
                    stopped.extend(_freeze(stack, tag))

            sem = asyncio.Semaphore(concurrency)

            async def one(i: int) -> tuple[int, str]:
                tag = f"task-{i:02d}"
                async with sem:
                    return await _task(client, model, tag, tokens, lambda n: on_chunk(tag, n))

            t0 = time.monotonic()
            done = await asyncio.gather(*(one(i) for i in range(tasks)))
            wall = time.monotonic() - t0
            await eventually_async(
                lambda: _serving(events, arm) is not None,
                timeout=REACTION_WAIT,
                interval=0.2,
                what="a serving life",
            )
        rows = [
            dict(r)
            for r in ledger.query(
                "SELECT request_id, life_id, outcome, started_at, ttft, detail_json FROM requests"
            )
        ]
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        ledger.close()
    out.lost = sum(1 for _, err in done if err)
    out.errors = list(dict.fromkeys(err for _, err in done if err))[:3]
    out.tokens_per_s = round(sum(n for n, _ in done) / wall, 1)
    wedged = next((e for e in events if isinstance(e, Wedged)), None)
    if wedged is None:
        return out
    serving = _serving(events, arm)
    out.serving = round(serving.ts - wedged.ts, 3) if serving is not None and arm != "pool" else None
    by_id = {r["request_id"]: r for r in rows}
    for r in rows:
        if r["life_id"] != wedged.life_id or r["outcome"] != vocab.RESUMED:
            continue
        out.struck += 1
        nxt = by_id.get(json.loads(r["detail_json"] or "{}").get("resumed_as"))
        if nxt is not None and nxt["ttft"] is not None:
            out.wait.append(round(nxt["started_at"] + nxt["ttft"] - wedged.ts, 3))
    return out


def _serving(events: list[Event], arm: str) -> Event | None:
    """After the wedge verdict, what serves again: the promotion (``one+spare``), the next ready life
    (``one``), the verdict itself (``pool``: its other member was serving all along)."""
    wedged = next((i for i, e in enumerate(events) if isinstance(e, Wedged)), None)
    if wedged is None:
        return None
    if arm == "pool":
        return events[wedged]
    kind = Promoted if arm == ARMS[1] else ServerReady
    return next((e for e in events[wedged:] if isinstance(e, kind)), None)


async def _spares_ready(stack: Stack) -> None:
    """A spare's trial starts once its spare is ready: the arm under test is a spare beside."""
    members: list[Supervisor] = stack.pool.members
    for m in members:
        standby = m.standby
        if standby is not None and not standby.off:
            await eventually_async(standby.ready, timeout=REACTION_WAIT, interval=0.2, what="the spare ready")


def _freeze(stack: Stack, tag: str) -> list[int]:
    """SIGSTOP the EngineCore of the life serving ``tag`` (vLLM)."""
    info = stack.pool.life(tag)
    member = stack.pool.member_of(info.life_id if info is not None else None)
    life = member.current if member is not None else None
    pid = _engine_core(life.proc.pid) if life is not None and life.proc.pid is not None else None
    if pid is None:
        return []
    os.kill(pid, signal.SIGSTOP)
    return [pid]


def _med(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def summary(trials: list[Trial]) -> dict[str, dict[str, Any]]:
    """Per arm: tasks lost in all, the median wait of a struck request, the median time to a
    serving life, the median tokens/s, and the engines' memory."""
    out: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        mine = [t for t in trials if t.arm == arm]
        if not mine:
            continue
        out[arm] = {
            "trials": len(mine),
            "tasks_lost": sum(t.lost for t in mine),
            "tasks": sum(t.tasks for t in mine),
            "struck": sum(t.struck for t in mine),
            "wait_median": _med([w for t in mine for w in t.wait]),
            "wait_range": [min(w for t in mine for w in t.wait), max(w for t in mine for w in t.wait)]
            if any(t.wait for t in mine)
            else None,
            "serving_median": _med([t.serving for t in mine if t.serving is not None]),
            "tokens_per_s_median": _med([t.tokens_per_s for t in mine]),
            "memory_gb": next((t.memory_gb for t in mine if t.memory_gb), []),
        }
    return out


def table(summ: dict[str, dict[str, Any]]) -> list[str]:
    head = (
        f"{'arm':<9}{'tasks lost':>10}{'struck':>8}{'wait (s)':>10}{'(range)':>13}{'serving (s)':>13}{'tokens/s':>10}"
        "  engines' PSS (GB)"
    )
    lines = [head]
    for arm, s in summ.items():
        wait = "-" if s["wait_median"] is None else f"{s['wait_median']:.2f}"
        span = "" if s["wait_range"] is None else f"{s['wait_range'][0]:.1f} to {s['wait_range'][1]:.1f}"
        serving = "-" if s["serving_median"] is None else f"{s['serving_median']:.2f}"
        mem = " + ".join(f"{m:.2f}" for m in s["memory_gb"]) or "-"
        lines.append(
            f"{arm:<9}{s['tasks_lost']:>4} of {s['tasks']:<3}{s['struck']:>8}{wait:>10}{span:>13}{serving:>13}"
            f"{s['tokens_per_s_median'] or 0:>10.1f}  {mem}"
        )
    return lines
