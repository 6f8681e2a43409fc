"""``wedgewatch compare RUN_A RUN_B [--ledger PATH] [--ledger-b PATH] [--json]`` and
``wedgewatch compare --counts K/N K/N`` for a 2x2 table from elsewhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli._app import app, open_ledger


def _counts(a: str, b: str, json_out: bool) -> None:
    from wedgewatch.analysis import twogroups

    (k1, n1), (k2, n2) = twogroups.parse_count(a), twogroups.parse_count(b)
    g = twogroups.two_groups(k1, n1, k2, n2)
    if json_out:
        typer.echo(json.dumps(g, indent=2))
        return
    typer.echo("\n".join(["two independent groups:", *twogroups.render(g, "counts")]))


@app.command("compare")
def compare_cmd(
    run_a: Annotated[str | None, typer.Argument(help="The first run (A).")] = None,
    run_b: Annotated[str | None, typer.Argument(help="The second run (B).")] = None,
    ledger: Annotated[
        Path | None, typer.Option("--ledger", help="Ledger of run A (default: wedgewatch.sqlite).")
    ] = None,
    ledger_b: Annotated[
        Path | None, typer.Option("--ledger-b", help="Ledger of run B (default: the same as A's).")
    ] = None,
    counts: Annotated[
        tuple[str, str] | None,
        typer.Option(
            "--counts",
            help="Two groups as K/N K/N (for example 15/15 0/12): their rates, the difference and "
            "Fisher's exact test, with no ledger.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Compare two runs: per-instance outcomes, resolved rates (over all instances and over model
    outcomes, infra_failed and pending beside), B - A with a 95% Newcombe interval, McNemar's
    exact test on the instances both finished, Fisher's exact test on infra_failed instances and
    on wedged server lives, every configuration factor that differs, and what the data can say."""
    if counts is not None:
        if run_a is not None or run_b is not None:
            raise BadInput("compare: give either two runs or --counts K/N K/N, not both")
        _counts(counts[0], counts[1], json_out)
        return
    if run_a is None or run_b is None:
        raise BadInput("compare: give two runs (RUN_A RUN_B), or --counts K/N K/N")
    from wedgewatch.analysis.compare import compare, render_text

    with open_ledger(ledger) as la:
        if ledger_b is None or Path(ledger_b).resolve() == Path(la.path).resolve():
            result = compare(la, run_a, la, run_b)
        else:
            with open_ledger(ledger_b) as lb:
                result = compare(la, run_a, lb, run_b)
    typer.echo(json.dumps(result, indent=2) if json_out else render_text(result))
