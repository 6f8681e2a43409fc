"""``wedgewatch report [RUN] [--ledger PATH] [--json] [--survival] [--html PATH]``: a run's
summary from the ledger, the survival of its server lives, and the HTML report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli._app import LedgerOption, app, open_ledger


@app.command("report")
def report_cmd(
    run_id: Annotated[
        str | None, typer.Argument(help="Run id (default: the latest run in the ledger).")
    ] = None,
    ledger: LedgerOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    survival_out: Annotated[
        bool,
        typer.Option(
            "--survival",
            help="Also the Kaplan–Meier survival of the run's server lives by age in requests "
            "(a table; with --json, a 'survival' key).",
        ),
    ] = False,
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Also write the HTML report (one self-contained file) to PATH."),
    ] = None,
) -> None:
    """Summarise a run: outcomes with infra_failed and pending beside the score, resolved rates
    with 95% Wilson intervals, attempts by status, stalls by kind, server lives and restarts,
    time lost to infrastructure."""
    from wedgewatch.analysis.summary import render_table, summarise

    with open_ledger(ledger) as lg:
        s = summarise(lg, run_id)
        sv = None
        if survival_out:
            from wedgewatch.analysis.survival import survival

            sv = survival(lg, [s["run_id"]])
        if html is not None:
            from wedgewatch.analysis.html import write_html

            if html.is_dir():
                raise BadInput(f"--html: {html} is a directory")
            try:
                write_html(lg, html, [s["run_id"]])
            except OSError as exc:
                raise BadInput(f"--html: {html}: {exc.strerror or exc}") from None
            typer.echo(f"html report: {html}", err=True)
    if json_out:
        typer.echo(json.dumps({**s, "survival": sv.as_dict()} if sv is not None else s, indent=2))
        return
    from rich.console import Console

    Console(width=max(Console().width, 110)).print(render_table(s))
    if sv is not None:
        from wedgewatch.analysis.survival import render_text

        typer.echo(render_text(sv))
