"""``wedgewatch plan [--factors ...] [--fraction] [--out DIR] [--json]`` and
``wedgewatch plan --analyse RUN_ID... --ledger PATH``: ablation designs and their analysis."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli._app import LedgerOption, app, open_ledger


@app.command("plan")
def plan_cmd(
    factors: Annotated[
        list[str] | None,
        typer.Option(
            "--factors",
            help="Factors, comma-separated or repeated: fresh, warmup, flags, concurrency, lora, "
            "prefix_caching, eager; NAME=A/B sets the two levels; section.field=A/B makes any "
            "config field a factor (default: fresh,warmup,flags,concurrency).",
        ),
    ] = None,
    fraction: Annotated[
        bool, typer.Option("--fraction", help="The smallest resolution IV fraction (4 to 8 factors).")
    ] = False,
    baseline: Annotated[
        float,
        typer.Option("--baseline", help="Per-instance wedge (api_error) rate at a factor's first level."),
    ] = 0.05,
    effect: Annotated[
        float, typer.Option("--effect", help="Difference in that rate to detect (absolute).")
    ] = 0.2,
    alpha: Annotated[float, typer.Option("--alpha", help="Two-sided significance level.")] = 0.05,
    power: Annotated[float, typer.Option("--power", help="Power to detect --effect.")] = 0.8,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random run order.")] = 0,
    name: Annotated[str, typer.Option("--name", help="Run id prefix of the cells.")] = "plan",
    base: Annotated[
        Path | None,
        typer.Option(
            "--base", help="Run config every cell starts from (default: the simulator, seed-used-server)."
        ),
    ] = None,
    used_age: Annotated[
        int, typer.Option("--used-age", help="Requests a 'used' simulator has served (--preload-age).")
    ] = 3000,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write one TOML per cell, design.json and run.sh here.")
    ] = None,
    analyse_runs: Annotated[
        list[str] | None,
        typer.Option("--analyse", help="Analyse these runs (repeat, or give them after the flag)."),
    ] = None,
    runs: Annotated[list[str] | None, typer.Argument(help="More run ids for --analyse.")] = None,
    ledger: LedgerOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the plan or the analysis as JSON.")] = False,
) -> None:
    """Plan a factorial ablation of the procedure (full 2^k or a resolution IV fraction; the
    instances per cell for the power asked; a seeded random run order; one run config per cell),
    or analyse a finished one: each factor's main effect on the per-attempt api_error rate."""
    from wedgewatch.analysis import plan as pl

    extra = pl.parse(factors) if factors else []
    if analyse_runs is not None:
        ids = [*analyse_runs, *(runs or [])]
        with open_ledger(ledger) as lg:
            result = pl.analyse(lg, ids, extra)
        typer.echo(json.dumps(result, indent=2, default=str) if json_out else pl.render_text(result))
        return
    if runs:
        raise BadInput(f"plan: unexpected argument {runs[0]!r} (run ids go with --analyse)")
    if not name.replace("-", "").replace("_", "").isalnum():
        raise BadInput(f"--name: {name!r}: letters, digits, '-' and '_' only")
    if used_age < 1:
        raise BadInput("--used-age: must be at least 1")
    chosen = extra or pl.parse([",".join(pl.DEFAULT_FACTORS)])
    plan = pl.make_plan(
        chosen,
        fraction=fraction,
        baseline=baseline,
        effect=effect,
        alpha=alpha,
        power=power,
        seed=seed,
        name=name,
        base=base,
        used_age=used_age,
    )
    written = pl.write_plan(plan, out) if out is not None else []
    if json_out:
        typer.echo(json.dumps(plan, indent=2))
    else:
        typer.echo(pl.render_plan(plan))
    if written:
        typer.echo(f"wrote {len(written) - 2} run configs, design.json and run.sh to {out}", err=True)
