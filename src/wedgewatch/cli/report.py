"""``wedgewatch report [RUN] [--ledger PATH] [--json]``: a run's summary from the ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.cli._app import app
from wedgewatch.config import RunConfig
from wedgewatch.errors import BadInput
from wedgewatch.ledger import Ledger


def open_ledger(path: Path | None) -> Ledger:
    """The ledger at ``path`` (default: run.ledger's default); BadInput if it does not exist."""
    p = Path(path) if path is not None else Path(RunConfig().ledger)
    if not p.exists():
        raise BadInput(f"--ledger: {p} does not exist")
    return Ledger(p)


@app.command("report")
def report_cmd(
    run_id: Annotated[
        str | None, typer.Argument(help="Run id (default: the latest run in the ledger).")
    ] = None,
    ledger: Annotated[
        Path | None, typer.Option("--ledger", help="Ledger file (default: wedgewatch.sqlite).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Summarise a run: outcomes with infra_failed and pending beside the score, resolved rates
    with 95% Wilson intervals, attempts by status, stalls by kind, server lives and restarts,
    time lost to infrastructure."""
    from wedgewatch.runner.summary import render_table, summarise

    with open_ledger(ledger) as lg:
        s = summarise(lg, run_id)
    if json_out:
        typer.echo(json.dumps(s, indent=2))
        return
    from rich.console import Console

    Console(width=max(Console().width, 110)).print(render_table(s))
