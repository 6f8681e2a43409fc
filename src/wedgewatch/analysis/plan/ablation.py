"""``make ablation``: the 2^(4-1) design of the story's procedure run for real on the simulator,
over several seeds, and whether the analysis recovers the scenario's ground truth.

For each seed: ``wedgewatch plan --fraction`` on the simulator's story scenario
(``seed-used-server``) with ``run.seed`` set to the seed, every cell through ``wedgewatch run``
in the plan's random order (one process per cell, as a user would), then ``wedgewatch plan
--analyse``. The ground truth of the scenario is that a used server (``fresh = off``) does most of
the work, four-way concurrency comes second, and warm-up matters only for the first requests of a
life. A seed *recovers* it when the verdict names fresh first, concurrency second, and does not
claim warm-up. Slow (minutes per seed on two cores): not part of ``make test``.

    python -m wedgewatch.analysis.plan.ablation [--seeds 3] [--out .wedgewatch/ablation]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from wedgewatch.analysis.plan.tomlout import dumps


def _wedgewatch(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", *args], capture_output=True, text=True, cwd=cwd, check=False
    )


def base_config(seed: int, out: Path) -> dict[str, Any]:
    """The plan's own default base (the story scenario, 100x faster), with this seed and every
    path under ``out``. Evaluation is off: the outcome analysed is api_error per attempt."""
    return {
        "server": {
            "profile": "sim",
            "scenario": "seed-used-server",
            "args": ["--policy", "swe"],
            "log_dir": str(out / "logs"),
            "max_restarts": 200,  # a used server wedges again and again: the design needs its cells
        },
        "run": {
            "time_scale": 100.0,
            "seed": seed,
            "evaluate": False,
            "ledger": str(out / "ablation.sqlite"),
            "workdir": str(out / "work"),
        },
    }


def recovered(analysis: dict[str, Any]) -> dict[str, Any]:
    """Whether the verdict names fresh first and concurrency second, and leaves warm-up unclaimed."""
    verdict = analysis["verdict"]
    # "Most of the work is done by fresh: ..." and "Also clear: concurrency: ...": the factor is
    # the word before the colon of the first, the word after "Also clear:" of the second.
    claimed = [
        line.split(":", 1)[0].split()[-1]
        if line.startswith("Most of the work is done by")
        else line.removeprefix("Also clear:").split(":", 1)[0].strip()
        for line in verdict
        if line.startswith(("Most of the work is done by", "Also clear:"))
    ]
    return {
        "claimed": claimed,
        "fresh_first": claimed[:1] == ["fresh"],
        "concurrency_second": claimed[1:2] == ["concurrency"],
        "warmup_not_claimed": "warmup" not in claimed,
        "recovered": claimed[:2] == ["fresh", "concurrency"] and "warmup" not in claimed,
    }


def one_seed(seed: int, root: Path) -> dict[str, Any]:
    out = root / f"seed-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    base = out / "base.toml"
    base.write_text(dumps(base_config(seed, out), f"make ablation: base config, seed {seed}"))
    name = f"abl-s{seed}"
    plan = _wedgewatch(
        "plan",
        "--fraction",
        "--seed",
        str(seed),
        "--name",
        name,
        "--base",
        str(base),
        "--out",
        str(out),
        "--json",
    )
    if plan.returncode != 0:
        raise SystemExit(f"plan failed: {plan.stderr.strip()}")
    design = json.loads((out / "design.json").read_text())
    cells: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for run_id in design["run_order"]:
        t = time.monotonic()
        proc = _wedgewatch("run", str(out / f"{run_id}.toml"), "--run-id", run_id, "--json")
        cells.append({"run_id": run_id, "exit": proc.returncode, "seconds": round(time.monotonic() - t, 1)})
        print(f"seed {seed}: {run_id} exit {proc.returncode} in {cells[-1]['seconds']} s", flush=True)
    wall = time.monotonic() - t0
    ledger = str(out / "ablation.sqlite")
    analysed = _wedgewatch("plan", "--analyse", *design["run_order"], "--ledger", ledger, "--json")
    if analysed.returncode != 0:
        raise SystemExit(f"analysis failed: {analysed.stderr.strip()}")
    analysis = json.loads(analysed.stdout)
    text = _wedgewatch("plan", "--analyse", *design["run_order"], "--ledger", ledger).stdout
    (out / "analysis.txt").write_text(text)
    return {"seed": seed, "wall_seconds": round(wall, 1), "cells": cells, "verdict": analysis["verdict"],
            **recovered(analysis)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m wedgewatch.analysis.plan.ablation", description=__doc__)
    ap.add_argument("--seeds", type=int, default=3, help="how many seeds (0, 1, ...)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(".wedgewatch/ablation"))
    args = ap.parse_args(argv)
    root = args.out.resolve()
    results = [one_seed(s, root) for s in range(args.first_seed, args.first_seed + args.seeds)]
    summary = {"seeds": len(results), "recovered": sum(r["recovered"] for r in results), "runs": results}
    (root / "summary.json").write_text(json.dumps(summary, indent=2))
    for r in results:
        print(f"seed {r['seed']}: {r['wall_seconds']} s, claimed {r['claimed']}, recovered {r['recovered']}")
    print(f"recovered the ground truth in {summary['recovered']} of {summary['seeds']} seeds ({root})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
