"""``wedgewatch export [RUN] --format swebench|results|csv [--out PATH]``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.base.files import write_private
from wedgewatch.cli._app import LedgerOption, app, open_ledger


@app.command("export")
def export_cmd(
    run_id: Annotated[
        str | None,
        typer.Argument(
            help="Run id, or the id `wrap` printed (default: the latest run or wrapped run in the ledger)."
        ),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="swebench (predictions JSONL for the official harness), results (one JSON line per "
            "instance with every attempt), csv (one row per instance).",
        ),
    ] = "results",
    out: Annotated[Path | None, typer.Option("--out", help="Write here instead of stdout.")] = None,
    ledger: LedgerOption = None,
) -> None:
    """Export a run. Predictions leave out instances without a model outcome (infra_failed,
    pending): they are never written as empty patches. A wrapped run exports results or csv: one
    row per tag its harness gave its requests (its patches are the harness's own)."""
    from wedgewatch.analysis.export import FORMATS, render
    from wedgewatch.ledger import queries

    if fmt not in FORMATS:
        raise BadInput(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    with open_ledger(ledger) as lg:
        wrapped, row = queries.resolve_any(lg, run_id)
        if wrapped:
            from wedgewatch.analysis import wrapped_export

            rid = row["harness_run_id"]
            text = wrapped_export.render(lg, rid, fmt)
        else:
            rid = row["run_id"]
            text = render(lg, rid, fmt)
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        write_private(out, text)  # the user's only, as every file wedgewatch writes
    except OSError as exc:
        raise BadInput(f"--out: {out}: {exc.strerror or exc}") from None
    lines = text.count("\n") - (1 if fmt == "csv" else 0)
    typer.echo(f"wrote {lines} {'rows' if fmt == 'csv' else 'lines'} of run {rid} to {out}", err=True)
