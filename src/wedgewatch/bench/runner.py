"""``wedgewatch bench runner``: the runner's own cost, at 200 and at 2,000 instances.

A trivial simulated task: the ``echo`` agent (one request, a fixed patch) on instances of a
one-file repository cloned from a local mirror, against the simulator (healthy, time scale 100),
64 instances at a time, evaluation off. Each size runs in its own process, so its peak RSS is its
own. Printed per size:

- runner overhead per attempt: the runner's synchronous work (the instance_next lookup, the
  attempt row, starting the worker thread, reading the proxy's rows, deciding, the end row),
  without the agent, the sandbox or waiting on the event loop;
- sandbox and agent seconds per attempt (not the runner's, shown for scale);
- ledger rows written per second over the whole run (every table: runs, attempts, ends,
  requests, events, samples, ...);
- peak RSS of the process (runner + proxy + supervisor; the simulator is another process);
- the time ``summarise`` (what ``report`` prints) takes on that ledger, in-process and through
  the CLI.

    wedgewatch bench runner [--sizes 200,2000] [--concurrency 64] [--json]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from wedgewatch.base.vocab import SUBMITTED
from wedgewatch.config import Config
from wedgewatch.suites.materialise import commit_tree

REPO = "bench/trivial"
TIME_SCALE = 100.0


def make_fixture(root: Path, n: int) -> tuple[Path, Path]:
    """A mirror of a one-file repository and a JSONL suite of ``n`` instances on it."""
    repos = root / "repos"
    sha = commit_tree(
        repos / REPO.replace("/", "__"), {"README": "trivial\n"}, "base\n", "2024-01-01T00:00:00Z"
    )
    suite = root / "suite.jsonl"
    with suite.open("w") as fh:
        for i in range(n):
            rec = {
                "instance_id": f"bench__trivial-{i:05d}",
                "repo": REPO,
                "base_commit": sha,
                "problem_statement": f"Say hello to number {i}.",
            }
            fh.write(json.dumps(rec) + "\n")
    return suite, repos


def bench_config(root: Path, suite: Path, repos: Path, concurrency: int) -> Config:
    return Config.model_validate(
        {
            "server": {
                "profile": "sim",
                "scenario": "healthy",
                "time_scale": TIME_SCALE,
                "log_dir": str(root / "logs"),
                "warmup": {"count": 1},
            },
            # The proxy's deadlines stay real-time (run.time_scale 1) while the simulator runs
            # 100x: 64 attempts at a time on two shared cores must not turn into stalls, the
            # benchmark is about the runner, not about stall detection.
            "agent": {"name": "echo", "timeout": 120.0},
            "suite": {"path": str(suite), "repos_dir": str(repos)},
            "run": {
                "concurrency": concurrency,
                "ledger": str(root / "ledger.sqlite"),
                "workdir": str(root / "work"),
                "evaluate": False,
            },
        }
    )


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ledger_capacity(path: Path, rows: int = 2000) -> float:
    """Single-row transactions per second into a fresh ledger on the same disk (what each of the
    runner's appends is), for comparison with the rate a run needed."""
    from wedgewatch.ledger import Ledger

    with Ledger(path) as lg:
        t0 = time.perf_counter()
        for i in range(rows):
            lg.append("events", {"ts": time.time(), "kind": "bench", "detail_json": {"i": i}})
        return rows / (time.perf_counter() - t0)


def child(n: int, concurrency: int, root: Path) -> dict[str, Any]:
    """One size, in this process: run it, then measure."""
    from wedgewatch.analysis.summary import summarise
    from wedgewatch.ledger import Ledger
    from wedgewatch.runner import entry as runner_main
    from wedgewatch.runner.state import RunContext

    suite, repos = make_fixture(root, n)
    cfg = bench_config(root, suite, repos, concurrency)
    holder: list[RunContext] = []
    t0 = time.monotonic()
    ex = runner_main.start(cfg, run_id=f"bench-{n}", on_context=holder.append)
    wall = time.monotonic() - t0
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ctx = holder[0]
    with Ledger(cfg.run.ledger) as lg:
        tables = lg.tables()
        rows = sum(lg.query(f"SELECT COUNT(*) FROM {t}")[0][0] for t in tables)
        details = [json.loads(r[0] or "{}") for r in lg.query("SELECT detail_json FROM attempt_ends")]
        timings = [d["timings"] for d in details if "timings" in d]  # not on restart casualties
        reasons = {
            f"{r[0]}:{r[1]}": r[2]
            for r in lg.query("SELECT status, reason, COUNT(*) FROM attempt_ends GROUP BY status, reason")
        }
        lives = lg.query("SELECT COUNT(*) FROM server_lives")[0][0]
        statuses = {r[0]: r[1] for r in lg.query("SELECT status, COUNT(*) FROM attempt_ends GROUP BY status")}
        t1 = time.perf_counter()
        s = summarise(lg, f"bench-{n}")
        report_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "report", f"bench-{n}", "--ledger", cfg.run.ledger, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    report_cli_s = time.perf_counter() - t2
    attempts = len(ctx.timings.overhead)
    per_attempt = [cpu * 1000 for cpu, _ in ctx.timings.overhead]
    per_attempt_wall = [wall * 1000 for _, wall in ctx.timings.overhead]
    decisions_ms = sum(cpu for cpu, _ in ctx.timings.decisions) * 1000 / max(1, attempts)
    decisions_wall_ms = sum(wall for _, wall in ctx.timings.decisions) * 1000 / max(1, attempts)
    return {
        "instances": n,
        "concurrency": concurrency,
        "end": ex.end_mark,
        "resolved_or_submitted": s["attempts"]["by_status"][SUBMITTED],
        "statuses": statuses,
        "endings": reasons,
        "server_lives": lives,
        "attempts": attempts,
        "wall_s": round(wall, 2),
        "attempts_per_s": round(attempts / wall, 1),
        "overhead_ms_mean": round(statistics.fmean(per_attempt) + decisions_ms, 3),
        "overhead_ms_p50": round(_pct(per_attempt, 0.5), 3),
        "overhead_ms_p99": round(_pct(per_attempt, 0.99), 3),
        "decision_ms_per_attempt": round(decisions_ms, 3),
        "overhead_wall_ms_mean": round(statistics.fmean(per_attempt_wall) + decisions_wall_ms, 3),
        "overhead_wall_ms_p99": round(_pct(per_attempt_wall, 0.99), 3),
        "sandbox_ms_mean": round(statistics.fmean(t["sandbox"] for t in timings) * 1000, 1),
        "agent_ms_mean": round(statistics.fmean(t["agent"] for t in timings) * 1000, 1),
        "ledger_rows": rows,
        "ledger_rows_per_s": round(rows / wall, 1),
        "ledger_capacity_rows_per_s": round(ledger_capacity(root / "capacity.sqlite"), 0),
        "runner_write_ms_mean": round(
            ctx.timings.ledger_seconds * 1000 / max(1, ctx.timings.ledger_writes), 3
        ),
        "peak_rss_mib": round(peak_rss_mib, 1),
        "report_ms": round(report_s * 1000, 1),
        "report_cli_s": round(report_cli_s, 2),
        "report_cli_ok": proc.returncode == 0,
    }


def run(sizes: list[int], concurrency: int) -> list[dict[str, Any]]:
    """Each size in a fresh process (its peak RSS is its own)."""
    results = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"ww-bench-runner-{n}-") as tmp:
            proc = subprocess.run(
                [sys.executable, "-m", "wedgewatch.bench.runner", "--child", str(n), "--concurrency",
                 str(concurrency), "--root", tmp],
                capture_output=True,
                text=True,
                timeout=3600,
            )  # fmt: skip
            if proc.returncode != 0:
                raise RuntimeError(f"bench child for {n} instances failed:\n{proc.stderr[-3000:]}")
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return results


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--child", type=int, required=True)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--root", type=Path, required=True)
    a = p.parse_args(argv)
    print(json.dumps(child(a.child, a.concurrency, a.root)))


if __name__ == "__main__":
    main()


TARGET_OVERHEAD_MS = 5.0
"""The runner's own CPU per attempt, at most."""
TARGET_RSS_GROWTH = 0.20
"""Peak RSS growth from the smallest to the largest suite, less than."""


def judge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the measured sizes meet the targets."""
    growth = (results[-1]["peak_rss_mib"] / results[0]["peak_rss_mib"] - 1) if len(results) > 1 else 0.0
    return {
        "overhead_ok": all(r["overhead_ms_mean"] <= TARGET_OVERHEAD_MS for r in results),
        "rss_growth": round(growth, 3),
        "rss_ok": growth < TARGET_RSS_GROWTH,
    }
