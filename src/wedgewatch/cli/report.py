"""``wedgewatch report [RUN] [--ledger PATH] [--json] [--survival] [--html PATH]``: a run's
summary from the ledger, the survival of its server lives, and the HTML report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli._app import LedgerOption, app, open_ledger

if TYPE_CHECKING:
    from wedgewatch.ledger import Ledger


@app.command("report")
def report_cmd(
    run_id: Annotated[
        str | None,
        typer.Argument(
            help="Run id, or the id `wrap` printed (default: the latest run or wrapped run in the ledger)."
        ),
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
    time lost to infrastructure. For a wrapped run (`wedgewatch wrap`): its requests by outcome,
    stalls, requests resumed and those the harness sent again with success, server lives with
    their ages, and the requests by tag where the harness tagged them."""
    from wedgewatch.analysis.summary import render_table, summarise
    from wedgewatch.ledger import queries

    with open_ledger(ledger) as lg:
        wrapped, row = queries.resolve_any(lg, run_id)
        if wrapped:
            _report_wrapped(lg, str(row["harness_run_id"]), json_out, survival_out, html)
            return
        s = summarise(lg, str(row["run_id"]))
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


def _report_wrapped(lg: Ledger, run_id: str, json_out: bool, survival_out: bool, html: Path | None) -> None:
    """``report`` of a harness run: its own summary (analysis/wrapped.py); the survival of its
    lives as for a run. The HTML page is built from a run's attempts, which a wrapped run has not."""
    from wedgewatch.analysis import wrapped

    if html is not None:
        raise BadInput(
            f"--html: {run_id} is a wrapped run: the HTML report needs a run's attempts; "
            "report it as text, --json or --survival"
        )
    s = wrapped.summarise(lg, run_id)
    sv = None
    if survival_out:
        from wedgewatch.analysis.survival import survival

        sv = survival(lg, [run_id])
    if json_out:
        typer.echo(json.dumps({**s, "survival": sv.as_dict()} if sv is not None else s, indent=2))
        return
    typer.echo(wrapped.render_text(s))
    if sv is not None:
        from wedgewatch.analysis.survival import render_text

        typer.echo(render_text(sv))
