"""``wedgewatch demo``: the story's 20-instance run on the simulator, one harness per arm."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from wedgewatch.base.vocab import INFRA_FAILED
from wedgewatch.cli._app import app, check_line


@app.command("demo")
def demo_cmd(
    out: Annotated[Path, typer.Option("--out", help="Directory for the ledger and results.")] = Path(
        "wedgewatch-demo"
    ),
    arms: Annotated[
        str, typer.Option("--arms", help="Arms, comma-separated: naive, guarded, story-fix, fresh-naive.")
    ] = "naive,guarded",
    seed: Annotated[int, typer.Option("--seed", help="First seed (the simulator's faults and model).")] = 1,
    seeds: Annotated[
        int,
        typer.Option("--seeds", min=1, help="Run each arm at this many seeds; cells are median [min-max]."),
    ] = 1,
    lora: Annotated[
        bool, typer.Option("--lora", help="Every arm's agent asks for the seed's LoRA adapter.")
    ] = False,
    time_scale: Annotated[
        float, typer.Option("--time-scale", min=1.0, help="Divides every simulated duration.")
    ] = 200.0,
    instances: Annotated[
        int, typer.Option("--instances", min=1, max=20, help="Bundled instances per arm.")
    ] = 20,
    scenario: Annotated[
        str, typer.Option("--scenario", help="Simulator scenario of every arm (a bundled name or a file).")
    ] = "story",
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="ARM:section.field=VALUE changes one arm's config (repeatable)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print every cell as JSON.")] = False,
) -> None:
    """Replay the story on the simulator: each arm is one harness (naive SDK defaults, wedgewatch,
    the story's own fix, SDK defaults on a warmed server) on the same wedging server, with the
    model's true skill beside each published score."""
    from rich.console import Console
    from rich.table import Table

    from wedgewatch.demo import REPORT, DemoOptions, check_out_dir, earlier_runs, run_demo, scenario_skill
    from wedgewatch.demo.arms import parse_arms, parse_set
    from wedgewatch.demo.table import footnote, table_rows

    if "WEDGEWATCH_LOG" not in os.environ:
        # The table is the demo's output; the supervisor's warnings would interleave with it.
        logging.getLogger("wedgewatch").setLevel(logging.ERROR)
    opts = DemoOptions(
        out_dir=out,
        seed=seed,
        seeds=seeds,
        arms=parse_arms(arms),
        lora=lora,
        time_scale=time_scale,
        instances=instances,
        scenario=scenario,
        overrides=parse_set(set_ or []),
    )
    check_out_dir(out)  # before anything is printed: a refusal is one line
    scenario_skill(scenario)
    console = Console(stderr=True)
    if not json_out:
        console.print(
            f"[bold]wedgewatch demo[/]: {instances} bundled instances, {opts.concurrency} at a time, "
            f"scenario {scenario}{' with the LoRA adapter' if lora else ''}, time scale {time_scale:g}x, "
            f"{seeds} seed(s) from {seed}; arms {', '.join(opts.arms)}, one after the other."
        )
    ledger = out / "ledger.sqlite"
    earlier = earlier_runs(out)
    if earlier:
        typer.echo(
            f"wedgewatch demo: {out}/ holds an earlier demo's {len(earlier)} run(s), "
            f"{', '.join(earlier)}: they stay in {ledger}; its summary, report and results files "
            f"are written anew (wedgewatch export --ledger {ledger} RUN_ID gives a run's results back)",
            err=True,
        )
    doc = run_demo(opts, _progress(len(opts.arms) * seeds), live=not json_out and sys.stderr.isatty())
    check_line(str(ledger))
    if json_out:
        typer.echo(json.dumps(doc, indent=2))
        return
    table = Table(title="The story's run, replayed: one server condition, one harness per arm")
    table.add_column("")
    for a in doc["arms"]:
        table.add_column(a["title"], justify="right")
    for row in table_rows(doc["arms"]):
        table.add_row(*row)
    Console().print(table)
    typer.echo(footnote(time_scale, seeds))
    typer.echo(f"ledger: {ledger}  figures: {out / 'summary.json'}")
    typer.echo(f"report (every arm side by side, open in a browser): {out / REPORT}")
    typer.echo("runs:")
    for a in doc["arms"]:
        typer.echo(f"  {a['arm']}: {' '.join(r['run_id'] for r in a['runs'])}")
    first = [a["runs"][0]["run_id"] for a in doc["arms"]]
    typer.echo(f"look closer: wedgewatch report --ledger {ledger} {first[-1]}")
    if len(first) > 1:
        typer.echo(f"side by side: wedgewatch compare --ledger {ledger} {first[0]} {first[1]}")


def _progress(total: int) -> Callable[[str, int, str, dict[str, Any] | None], None]:
    """One line on stderr as each arm's run starts and one as it ends: a demo of several seeds
    runs for minutes, and each line says how far it is."""
    done = [0]
    began: dict[str, float] = {}

    def tell(arm: str, seed: int, run_id: str, cells: dict[str, Any] | None) -> None:
        if cells is None:
            began[run_id] = time.monotonic()
            typer.echo(f"{arm}, seed {seed} ({done[0] + 1} of {total}): run {run_id}", err=True)
            return
        done[0] += 1
        typer.echo(
            f"{arm}, seed {seed}: done in {time.monotonic() - began[run_id]:.0f} s: published "
            f"{cells['published_resolved']}/{cells['published_of']} (true {cells['true_resolved']}), "
            f"{INFRA_FAILED} {cells[INFRA_FAILED]}",
            err=True,
        )

    return tell
