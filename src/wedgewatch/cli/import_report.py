"""``wedgewatch import-report [RUN] REPORT.json``: verdicts of the official SWE-bench harness."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.cli._app import LedgerOption, app, open_ledger


@app.command("import-report")
def import_report_cmd(
    run_id: Annotated[str, typer.Argument(help="Run id the predictions came from.")],
    report: Annotated[
        Path, typer.Argument(help="The harness's run report (resolved_ids, unresolved_ids, ...).")
    ],
    ledger: LedgerOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print what was imported as JSON.")] = False,
) -> None:
    """Record the report's verdicts as evaluations (source swebench_report) of each instance's
    final attempt. Nothing is overwritten: the latest verdict of an attempt is the one that counts."""
    from wedgewatch.analysis.import_report import import_report

    with open_ledger(ledger, write=True) as lg:
        res = import_report(lg, run_id, report)
    data = {
        "run_id": res.run_id,
        "written": res.written,
        "not_in_run": res.not_in_run,
        "no_model_outcome": res.no_model_outcome,
    }
    if json_out:
        typer.echo(json.dumps(data, indent=2))
        return
    total = sum(res.written.values())
    typer.echo(f"run {res.run_id}: {total} verdicts imported {res.written}")
    if res.not_in_run:
        typer.echo(f"{len(res.not_in_run)} ids are not in the run: {', '.join(res.not_in_run[:5])}", err=True)
    if res.no_model_outcome:
        typer.echo(
            f"{len(res.no_model_outcome)} ids have no model outcome in the run (not written): "
            f"{', '.join(res.no_model_outcome[:5])}",
            err=True,
        )
