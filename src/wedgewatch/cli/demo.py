"""``wedgewatch demo``: the story's 20-instance run on the simulator, one harness per arm."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Annotated

import typer

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

    from wedgewatch.demo import REPORT, DemoOptions, check_out_dir, run_demo, scenario_skill
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
    doc = run_demo(opts)
    check_line(str(out / "ledger.sqlite"))
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
    typer.echo(f"ledger: {out / 'ledger.sqlite'}  figures: {out / 'summary.json'}")
    typer.echo(f"report (every arm side by side, open in a browser): {out / REPORT}")
    typer.echo(f"look closer: wedgewatch report --ledger {out / 'ledger.sqlite'} RUN_ID")
