"""``wedgewatch compare RUN_A RUN_B [--ledger PATH] [--ledger-b PATH] [--json]``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.cli._app import app
from wedgewatch.cli.report import open_ledger


@app.command("compare")
def compare_cmd(
    run_a: Annotated[str, typer.Argument(help="The first run (A).")],
    run_b: Annotated[str, typer.Argument(help="The second run (B).")],
    ledger: Annotated[
        Path | None, typer.Option("--ledger", help="Ledger of run A (default: wedgewatch.sqlite).")
    ] = None,
    ledger_b: Annotated[
        Path | None, typer.Option("--ledger-b", help="Ledger of run B (default: the same as A's).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Compare two runs: per-instance outcomes, resolved rates (over all instances and over model
    outcomes, infra_failed and pending beside), B - A with a 95% Newcombe interval, McNemar's
    exact test on the instances both finished, infrastructure rates, and what the data can say."""
    from wedgewatch.analysis.compare import compare, render_text

    with open_ledger(ledger) as la:
        if ledger_b is None or Path(ledger_b).resolve() == Path(la.path).resolve():
            result = compare(la, run_a, la, run_b)
        else:
            with open_ledger(ledger_b) as lb:
                result = compare(la, run_a, lb, run_b)
    typer.echo(json.dumps(result, indent=2) if json_out else render_text(result))
