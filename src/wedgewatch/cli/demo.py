"""``wedgewatch demo``: the story's 20-instance run on the simulator, naive against guarded."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.cli._app import app


@app.command("demo")
def demo_cmd(
    out: Annotated[Path, typer.Option("--out", help="Directory for the ledger and results.")] = Path(
        "wedgewatch-demo"
    ),
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of both arms (the simulator's faults and model).")
    ] = 1,
    time_scale: Annotated[
        float, typer.Option("--time-scale", min=1.0, help="Divides every simulated duration.")
    ] = 200.0,
    instances: Annotated[
        int, typer.Option("--instances", min=1, max=20, help="Bundled instances per arm.")
    ] = 20,
    scenario: Annotated[
        str, typer.Option("--scenario", help="Simulator scenario of both arms (a bundled name or a file).")
    ] = "seed-used-server",
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Replay the story on the simulator: a naive harness (SDK defaults, a used server, no proxy)
    against wedgewatch (fresh server, warm-up, proxy deadlines, restarts, task-level retries)."""
    from rich.console import Console
    from rich.table import Table

    from wedgewatch.demo import REPORT, DemoOptions, check_out_dir, footnote, run_demo, table_rows

    if "WEDGEWATCH_LOG" not in os.environ:
        # The table is the demo's output; the supervisor's warnings would interleave with it.
        logging.getLogger("wedgewatch").setLevel(logging.ERROR)
    opts = DemoOptions(out_dir=out, seed=seed, time_scale=time_scale, instances=instances, scenario=scenario)
    check_out_dir(out)  # before anything is printed: a refusal is one line
    console = Console(stderr=True)
    if not json_out:
        console.print(
            f"[bold]wedgewatch demo[/]: {instances} bundled instances, {opts.concurrency} at a time, "
            f"scenario {scenario}, time scale {time_scale:g}x; naive arm first, then guarded."
        )
    figures = run_demo(opts)
    if json_out:
        typer.echo(json.dumps(figures, indent=2))
        return
    table = Table(title="The story's run, replayed (simulated seconds divided by the time scale)")
    table.add_column("")
    table.add_column("naive (SDK defaults, used server)", justify="right")
    table.add_column("guarded (wedgewatch)", justify="right")
    for label, naive, guarded in table_rows(figures):
        table.add_row(label, naive, guarded)
    Console().print(table)
    typer.echo(footnote(time_scale))
    typer.echo(
        f"ledger: {out / 'ledger.sqlite'}  results: {out / 'results-naive.jsonl'}, "
        f"{out / 'results-guarded.jsonl'}  figures: {out / 'summary.json'}"
    )
    typer.echo(f"report (both arms, open in a browser): {out / REPORT}")
    typer.echo(f"look closer: wedgewatch report --ledger {out / 'ledger.sqlite'} RUN_ID")
