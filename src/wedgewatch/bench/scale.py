"""``wedgewatch bench scale``: what scale-out costs and buys (docs/scale-out.md, docs/benchmarks.md).

(a) **Runs.** The trivial task of ``bench runner`` (the ``echo`` agent: one request and a fixed
patch, on a one-file repository, evaluation off), on a pool of 1, 2 and 4 simulated servers, for
each executor and ledger asked for. Per cell: instances per minute and the runner's own CPU per
attempt (the same ``Span`` figure ``bench runner`` reports). Each cell runs in a process of its
own, one after another. Each simulator runs 4 streams at a time at ``--rate`` tokens/s (8: the
echo agent's 8-token reply takes a second), so one server cannot keep up with the concurrency and
more servers have something to buy. On Ray each attempt declares cores/concurrency CPUs, so
Ray runs as many attempts at once as the local executor does.

(b) **An idle pool of N members** (``--idle 1,16,64``): N simulators started, readied and warmed,
then watched for ``--idle-seconds`` with nothing to do; the driver's CPU per second (the
supervisors' scrapes, one per member per ``scrape_interval``), the ledger rows per second they
write (``metric_samples``), the start-up wall time and the driver's RSS. What 100 servers would
cost the one driver is read off these, measured, not guessed.

    wedgewatch bench scale [--servers 1,2,4] [--executor local ...] [--ledger sqlite ...]
                           [--instances 48] [--concurrency 16] [--idle 1,16,64] [--idle-seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wedgewatch.bench.runner import make_fixture
from wedgewatch.config import Config, ServerConfig, WatchdogConfig


def run_config(
    root: Path,
    suite: Path,
    repos: Path,
    servers: int,
    executor: str,
    ledger: str,
    concurrency: int,
    rate: float,
) -> Config:
    scenario = root / "scenario.toml"
    scenario.write_text(f"[server]\ntokens_per_s = {rate}\n")
    member = {
        "profile": "sim",
        "scenario": str(scenario),
        "log_dir": str(root / "logs"),
        "warmup": {"count": 1, "max_tokens": 8},
        "args": ["--max-num-seqs", "4"],  # a small server: 4 streams at a time, the rest queue
    }
    return Config.model_validate(
        {
            "servers": [dict(member) for _ in range(servers)],
            "agent": {"name": "echo", "timeout": 300.0},
            "suite": {"path": str(suite), "repos_dir": str(repos)},
            "run": {
                "concurrency": concurrency,
                "ledger": ledger,
                "workdir": str(root / "work"),
                "evaluate": False,
                "executor": executor,
                # Ray schedules by declared CPUs: at the default 1 per attempt a 2-core machine
                # would run 2 attempts at once, not `concurrency`. The echo agent only waits on
                # the server, so each declares its share of the machine and Ray runs as many at
                # once as the local executor's threads.
                "ray": {"num_cpus": round((os.cpu_count() or 1) / concurrency, 4)},
            },
        }
    )


def run_cell(
    n: int, servers: int, executor: str, ledger: str, concurrency: int, rate: float, root: Path
) -> dict[str, Any]:
    """One cell, in this process."""
    from wedgewatch.ledger import Ledger
    from wedgewatch.runner import entry as runner_main
    from wedgewatch.runner.state import RunContext

    suite, repos = make_fixture(root, n)
    target = ledger if ledger != "sqlite" else str(root / "ledger.sqlite")
    cfg = run_config(root, suite, repos, servers, executor, target, concurrency, rate)
    holder: list[RunContext] = []
    # A PostgreSQL ledger is shared by the cells (and by earlier benchmarks): each run its own id.
    rid = f"scale-{servers}-{executor}-{secrets.token_hex(3)}"
    t0 = time.monotonic()
    ex = runner_main.start(cfg, run_id=rid, on_context=holder.append)
    wall = time.monotonic() - t0
    ctx = holder[0]
    with Ledger(target) as lg:
        first = lg.query("SELECT MIN(started_at), MAX(ended_at) FROM attempt_view WHERE run_id = ?", (rid,))[
            0
        ]
        served = lg.query(
            "SELECT l.member, COUNT(*) FROM attempts a JOIN server_lives l USING (life_id) "
            "WHERE a.run_id = ? GROUP BY l.member",
            (rid,),
        )
        statuses = {
            r[0]: r[1]
            for r in lg.query(
                "SELECT e.status, COUNT(*) FROM attempt_ends e JOIN attempts a USING (attempt_id) "
                "WHERE a.run_id = ? GROUP BY e.status",
                (rid,),
            )
        }
    attempts = max(1, len(ctx.timings.overhead))
    overhead = [cpu * 1000 for cpu, _ in ctx.timings.overhead]
    decisions = sum(cpu for cpu, _ in ctx.timings.decisions) * 1000 / attempts
    working = (first[1] - first[0]) if first[0] is not None and first[1] is not None else wall
    return {
        "servers": servers,
        "executor": executor,
        "ledger": "postgresql" if ledger.startswith("postgres") else "sqlite",
        "instances": n,
        "end": ex.end_mark,
        "statuses": statuses,
        "attempts_by_member": {str(r[0]): int(r[1]) for r in served},
        "wall_s": round(wall, 2),
        "working_s": round(working, 2),
        "instances_per_min": round(n / working * 60, 1),
        "overhead_ms_mean": round(statistics.fmean(overhead) + decisions, 3) if overhead else None,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


async def _idle_pool(n: int, seconds: float, root: Path) -> dict[str, Any]:
    from wedgewatch.bench.procfs import rss_mib
    from wedgewatch.ledger import Ledger
    from wedgewatch.stack.servers import Stack

    members = [
        ServerConfig.model_validate(
            {"name": f"s{i}", "scenario": "healthy", "log_dir": str(root / "logs"), "warmup": {"count": 1}}
        )
        for i in range(n)
    ]
    me = os.getpid()
    with Ledger(root / f"idle-{n}.sqlite") as lg:
        stack = Stack(members, WatchdogConfig(), ledger=lg, run_id=f"idle-{n}")
        t0 = time.monotonic()
        await stack.start()
        startup = time.monotonic() - t0
        try:
            rows0 = lg.query("SELECT COUNT(*) FROM metric_samples")[0][0]
            # The driver is this process, so read its CPU clock in nanoseconds: /proc's ticks are
            # 10 ms, and an idle pool's driver can spend less than one tick in a short window.
            cpu0, w0 = time.process_time(), time.monotonic()
            await asyncio.sleep(seconds)
            cpu1, w1 = time.process_time(), time.monotonic()
            rows1 = lg.query("SELECT COUNT(*) FROM metric_samples")[0][0]
            rss = rss_mib(me)
        finally:
            await stack.stop()
    return {
        "members": n,
        "startup_s": round(startup, 1),
        "driver_cpu_per_s": round((cpu1 - cpu0) / (w1 - w0), 4),
        "sample_rows_per_s": round((rows1 - rows0) / (w1 - w0), 1),
        "driver_rss_mib": round(rss, 1),
    }


def _child(argv: list[str], timeout: float) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "wedgewatch.bench.scale", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"bench scale {' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    doc: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return doc


def run(
    servers: list[int],
    executors: list[str],
    ledgers: list[str],
    instances: int,
    concurrency: int,
    rate: float,
    idle: list[int],
    idle_seconds: float,
    say: Callable[[str], None] = lambda _line: None,
) -> dict[str, Any]:
    """Every cell in a fresh process, one after another."""
    cells = []
    for ledger in ledgers:
        for executor in executors:
            for n in servers:
                say(f"run: {n} server(s), {executor} executor, {ledger.split(':')[0]} ledger")
                with tempfile.TemporaryDirectory(prefix="ww-bench-scale-") as tmp:
                    argv = ["--cell", str(n), "--executor", executor, "--ledger", ledger, "--instances",
                            str(instances), "--concurrency", str(concurrency), "--rate", str(rate), "--root", tmp]  # fmt: skip
                    cells.append(_child(argv, 3600))
    pools = []
    for n in idle:
        say(f"idle pool of {n}")
        with tempfile.TemporaryDirectory(prefix="ww-bench-scale-idle-") as tmp:
            pools.append(_child(["--idle", str(n), "--seconds", str(idle_seconds), "--root", tmp], 3600))
    return {"runs": cells, "idle": pools, "load_average": list(os.getloadavg()[:2])}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cell", type=int)
    p.add_argument("--idle", type=int)
    p.add_argument("--executor", default="local")
    p.add_argument("--ledger", default="sqlite")
    p.add_argument("--instances", type=int, default=48)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--rate", type=float, default=8.0)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--root", type=Path, required=True)
    a = p.parse_args(argv)
    if a.cell is not None:
        print(json.dumps(run_cell(a.instances, a.cell, a.executor, a.ledger, a.concurrency, a.rate, a.root)))
    elif a.idle is not None:
        print(json.dumps(asyncio.run(_idle_pool(a.idle, a.seconds, a.root))))


if __name__ == "__main__":
    main()
