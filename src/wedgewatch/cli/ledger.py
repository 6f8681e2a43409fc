"""``wedgewatch ledger``: what is done to a ledger as a whole: check its invariants, copy runs
between backends."""

from __future__ import annotations

from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli._app import app

ledger_app = typer.Typer(
    help="Ledgers as a whole: check their invariants, copy runs between SQLite and PostgreSQL.",
    no_args_is_help=True,
)
app.add_typer(ledger_app, name="ledger")


@ledger_app.command("copy")
def copy_cmd(
    src: Annotated[str, typer.Argument(help="The ledger to read: a SQLite file or postgresql://...")],
    dst: Annotated[str, typer.Argument(help="The ledger to write (created if needed).")],
    run: Annotated[str | None, typer.Option("--run", help="Copy only this run (default: all).")] = None,
) -> None:
    """Copy runs from SRC into DST, every row with its ids, in one transaction. A run DST already
    holds is refused (exit 2), never overwritten."""
    from wedgewatch.ledger import Ledger
    from wedgewatch.ledger.copy import copy
    from wedgewatch.ledger.target import describe, exists

    if not exists(src):
        raise BadInput(f"SRC: {src} does not exist")
    with Ledger(src) as source, Ledger(dst) as dest:
        done = copy(source, dest, run)
    if done.renumbered:
        typer.echo(f"note: DST had used their ids already; renumbered in order: {', '.join(done.renumbered)}")
    typer.echo(
        f"copied {len(done.runs)} run(s), {sum(done.rows.values())} rows, from {describe(src)} to {describe(dst)}"
    )


@ledger_app.command("check")
def check_cmd(
    ledger: Annotated[
        str | None,
        typer.Argument(help="The ledger: a SQLite file or postgresql://... (default: wedgewatch.sqlite)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Check every invariant of a ledger (each end has its start, each start its end unless its
    process is still at work, one final outcome per instance, rows point at existing rows, lives
    of one supervisor do not overlap, the schema is known). Read-only. Exit 1 naming each broken
    row; 0 when all hold."""
    import json

    from wedgewatch.cli._app import open_ledger
    from wedgewatch.ledger import checks

    with open_ledger(ledger) as lg:
        report = checks.check(lg)
        where = lg.path
    if as_json:
        typer.echo(
            json.dumps(
                {"ledger": where, "ok": report.ok, "rows": report.rows, "broken": report.broken}, indent=1
            )
        )
    else:
        for name, found in report.broken.items():
            for line in found:
                typer.echo(f"{name}: {line}")
        typer.echo(f"{where}: {report.line()}")
    if not report.ok:
        raise typer.Exit(1)
