"""``bench chaos``'s course: two fault-free runs (the control), then the same run under a seeded
schedule of faults, then the checker.

Each run is ``wedgewatch run`` on the bundled suite with the bash agent, in a directory of its own
(``root/<label>``). The chaos run's ledger sits on a small file system of its own when the
schedule fills it (``disk_full``, root only). The controls depend on the engine and the run's
shape, never on the seed, so they are kept (``control_dir``) and shared by every seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from wedgewatch.bench.chaos import checker, engines, margins, timing
from wedgewatch.bench.chaos.deal import Dealer, armed_faults
from wedgewatch.bench.chaos.kinds import Planned, plan
from wedgewatch.bench.chaos.process import Death, RunProcess, Sample
from wedgewatch.bench.chaos.replies import Exchange, compare, exchanges
from wedgewatch.bench.chaos.table import Dealt, Finished
from wedgewatch.bench.procfs import group_pids
from wedgewatch.bench.rig import armed, strikes
from wedgewatch.config import WatchdogConfig, load_config
from wedgewatch.ledger import Ledger
from wedgewatch.stack.servers import Stack
from wedgewatch.supervisor.profiles import served_name

RUN_SEED = 2
"""The run's own seed (the simulator's policy: at its skill of 0.5 some instances are solved);
the chaos seed picks the schedule, never the model."""
LEDGER_DISK_MB = 64


@dataclass
class RunResult:
    label: str
    run_id: str
    root: Path
    ledger: Path
    finished: bool
    wall: float
    tokens: float
    dealt: list[Dealt] = field(default_factory=list)
    deaths: list[Death] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    starts: int = 1
    summary: dict[str, Any] = field(default_factory=dict)
    disk: strikes.LedgerDisk | None = None

    @property
    def workdir(self) -> Path:
        return self.root / "work"

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "run_id": self.run_id,
            "root": str(self.root),
            "ledger": str(self.ledger),
            "done": self.finished,
            "wall": round(self.wall, 1),
            "tokens": round(self.tokens),
            "starts": self.starts,
            "dealt": [d.to_json() for d in self.dealt],
            "deaths": [vars(d) for d in self.deaths],
            "samples": [vars(s) for s in self.samples],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        return cls(
            data["label"], data["run_id"], Path(data["root"]), Path(data["ledger"]), data["done"],
            data["wall"], data["tokens"], starts=data["starts"],
        )  # fmt: skip

    def checked(self) -> timing.Run:
        return timing.Run(
            self.run_id,
            self.ledger,
            self.workdir,
            exchanges(self.workdir, self.run_id),
            self.samples,
            self.dealt,
        )


async def drive(
    engine: engines.Engine,
    shape: engines.Shape,
    root: Path,
    label: str,
    schedule: list[Planned],
    settle_timeout: float,
    run_timeout: float,
) -> RunResult:
    """One run of the suite in ``root``, ``schedule`` dealt as it goes; back once it finished (or
    ``run_timeout`` passed: then it is killed and not finished)."""
    root.mkdir(parents=True, exist_ok=True)
    disk = None
    if any(p.kind == "disk_full" for p in schedule) and os.geteuid() == 0:
        disk = strikes.LedgerDisk(root / "ledger-fs", LEDGER_DISK_MB)
        ledger = disk.path / "ledger.sqlite"
    else:
        ledger = root / "ledger.sqlite"
    try:
        scenario: Path | None = None
        faults: dict[str, armed.Armed] = {}
        if engine.name == engines.SIM:
            head = (
                engine.scenario.replace("tokens_per_s = 10.0", "tokens_per_s = 100.0")
                if shape.fast
                else engine.scenario
            )
            scenario, faults = armed.scenario(root / "armed", armed_faults(schedule), head)
        cfg = engines.config(engine, shape, root, ledger, RUN_SEED, scenario)
        run = RunProcess(cfg, f"chaos-{label}", root, engine.env)
        t0 = time.time()
        run.start()
        finished = False
        async with aiohttp.ClientSession() as session:
            table = Dealer(
                engine,
                run,
                ledger,
                root / "work",
                session,
                faults,
                root / "faults.jsonl",
                disk,
                settle_timeout,
            )
            try:
                for p in schedule:
                    await table.deal(p)
                await table.until(lambda: False, run_timeout)
            except Finished:
                finished = True
                for p in schedule[len(table.dealt) :]:
                    table.dealt.append(Dealt(p, skipped="the run finished first"))
            finally:
                table.record.close()
                if run.exited() is None:
                    run.kill()
    except BaseException:
        if disk is not None:
            disk.remove()
        raise
    result = RunResult(label, run.run_id, root, ledger, finished, time.time() - t0, table.progress.tokens)
    result.dealt, result.deaths, result.samples = table.dealt, run.deaths, run.samples
    result.starts, result.summary, result.disk = run.starts, run.summary, disk
    return result


ENGINE_EXIT = 5.0
"""Seconds vLLM's API server takes to exit after its engine died (its launcher's watchdog)."""


def detection_limit(config: Path) -> float:
    """The longest the run's settings take to find a dead or wedged life and stop it: the
    heartbeat window, two scrapes, the proxy's wait for the verdict, the grace before SIGKILL and
    the API server's own exit after its engine's death."""
    cfg = load_config(config)
    s, w = cfg.server, cfg.watchdog
    return s.heartbeat_window + 2 * s.scrape_interval + w.verdict_wait + s.stop_grace + ENGINE_EXIT


def cleanup(result: RunResult) -> list[str]:
    """Stop whatever the run left (after the checker has seen it): servers, sandbox commands,
    mounts; then the ledger's own file system. What was stopped, in lines."""
    done = []
    with contextlib.suppress(Exception), Ledger(result.ledger, read_only=True) as lg:
        for r in lg.query("SELECT pid FROM server_lives WHERE pid IS NOT NULL"):
            if group_pids(int(r["pid"])) and strikes.kill_group(int(r["pid"])):
                done.append(f"killed server group {r['pid']}")
    if result.workdir.exists():
        for pgid in strikes.in_sandbox(result.workdir):
            strikes.kill_group(pgid)
            done.append(f"killed sandbox group {pgid}")
        where = str(result.workdir.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            if line.split()[1].startswith(where):
                subprocess.run(["umount", "-l", line.split()[1]], check=False)
                done.append(f"unmounted {line.split()[1]}")
    if result.disk is not None:
        # The ledger leaves its file system for the run's directory (SQLite's online backup).
        copy = result.root / "ledger.sqlite"
        with (
            contextlib.closing(sqlite3.connect(result.ledger)) as src,
            contextlib.closing(sqlite3.connect(copy)) as dst,
        ):
            src.backup(dst)
        result.disk.remove()
        result.disk, result.ledger = None, copy
    return done


async def judge(
    config: Path, differing: list[tuple[Exchange, Exchange]], sample: list[Exchange]
) -> dict[str, Any]:
    """The margins of the differing replies and the control's, on a life of the run's engine
    started for them (``margins.py``)."""
    cfg = load_config(config)
    with tempfile.TemporaryDirectory(prefix="ww-chaos-margins-") as tmp:
        server = cfg.server.model_copy(update={"log_dir": tmp})
        ledger = Ledger(Path(tmp) / "ledger.sqlite")
        try:
            async with (
                Stack(server, WatchdogConfig(), ledger=ledger) as stack,
                aiohttp.ClientSession() as session,
            ):
                eng = margins.Engine(
                    session, stack.supervisor.base_url, cfg.agent.model or served_name(cfg.server)
                )
                found = await margins.noise(eng, sample)
                out: dict[str, Any] = {}
                for run, ctl in differing:
                    m = await margins.margin(eng, run, ctl)
                    out[run.request] = {
                        "exchange": f"{run.attempt_id} step {run.step}",
                        "margin": None if m is None else m.to_json(),
                        "accepted": margins.accepted(m, found["accept_below"]),
                    }
        finally:
            ledger.close()
    return {"control": found, "margins": out}


async def control(
    engine: engines.Engine, shape: engines.Shape, folder: Path, settle_timeout: float, run_timeout: float
) -> tuple[RunResult, RunResult]:
    """The two fault-free runs, made once per engine and shape and kept in ``folder``."""
    out = []
    for label in ("control-a", "control-b"):
        saved = folder / label / "result.json"
        if saved.exists():
            out.append(RunResult.from_json(json.loads(saved.read_text())))
            continue
        shutil.rmtree(folder / label, ignore_errors=True)
        result = await drive(engine, shape, folder / label, label, [], settle_timeout, run_timeout)
        cleanup(result)
        if result.finished:
            saved.write_text(json.dumps(result.to_json()))
        out.append(result)
    return out[0], out[1]


def control_holds(a: RunResult, b: RunResult) -> tuple[bool, dict[str, Any]]:
    """Whether the two controls match request by request, outcome by outcome."""
    cmp = compare(b.checked().exchanges, a.checked().exchanges)
    with Ledger(a.ledger, read_only=True) as la, Ledger(b.ledger, read_only=True) as lb:
        oa, ob = checker.outcomes(la, a.run_id), checker.outcomes(lb, b.run_id)
    figures = {
        "replies_equal": cmp.equal,
        "replies_differing": len(cmp.differing),
        "requests_unmatched": len(cmp.unmatched),
        "outcomes_equal": sum(1 for k in oa if ob.get(k) == oa[k]),
        "instances": len(oa),
        "first_departures": [w for _, w in cmp.unmatched[:3]]
        + [f"{e.attempt_id} step {e.step}" for e, _ in cmp.differing[:3]],
    }
    return a.finished and b.finished and cmp.held and oa == ob, figures


async def chaos(
    engine: engines.Engine,
    shape: engines.Shape,
    seed: int,
    faults: int,
    kinds: list[str],
    root: Path,
    control_dir: Path,
    settle_timeout: float,
    run_timeout: float,
    replay: str = "",
) -> dict[str, Any]:
    """The whole bench for one seed: its report as JSON (``replay``: the command that replays it)."""
    a, b = await control(engine, shape, control_dir, settle_timeout, run_timeout)
    holds, control_figures = control_holds(a, b)
    schedule = plan(seed, faults, kinds, a.tokens)
    run = await drive(
        engine, shape, root / f"seed-{seed}", f"seed-{seed}", schedule, settle_timeout, run_timeout
    )
    try:
        detection = detection_limit(run.root / "run.toml")
        checked, first = run.checked(), a.checked()
        broken, figures = checker.check_run(checked, first, b.checked(), set(), detection)
        differing = compare(checked.exchanges, first.exchanges).differing
        if differing and engine.name == engines.VLLM_CPU:
            judged = await judge(run.root / "run.toml", differing, first.exchanges)
            ok = {key for key, m in judged["margins"].items() if m["accepted"]}
            broken, figures = checker.check_run(checked, first, b.checked(), ok, detection)
            figures["margins"] = judged
        if not run.finished:
            broken.append(checker.Broken("one_outcome", f"the run did not finish within {run_timeout:.0f} s"))
    finally:
        left = cleanup(run)
    return {
        "engine": engine.name,
        "seed": seed,
        "faults": faults,
        "shape": vars(shape),
        "control": {"holds": holds, **control_figures, "wall": [a.wall, b.wall], "tokens": a.tokens},
        "run": run.to_json(),
        "figures": figures,
        "broken": [vars(x) for x in broken],
        "replay": replay,
        "cleanup": left,
    }


def run_bench(**kwargs: Any) -> dict[str, Any]:
    return asyncio.run(chaos(**kwargs))
