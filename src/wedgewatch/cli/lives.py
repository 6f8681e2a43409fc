"""``wedgewatch lives [RUN...] [--ledger PATH] [--by instances|requests|tokens] [--risk 0.05]
[--json] [--plot PATH]``: server lives until a wedge, and the recycling interval for a risk."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli._app import LedgerOption, app, open_ledger


@app.command("lives")
def lives_cmd(
    run_ids: Annotated[
        list[str] | None,
        typer.Argument(
            help="Runs, or ids `wrap` printed, whose lives are pooled (default: the latest of either)."
        ),
    ] = None,
    ledger: LedgerOption = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Age of a life in instances (finished), requests or tokens (default: instances; "
            "requests for a wrapped run, which has no attempts).",
        ),
    ] = None,
    risk: Annotated[
        float, typer.Option("--risk", help="The share of lives allowed to wedge before their recycle.")
    ] = 0.05,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Also write the curve (PNG, with its 95% band) to PATH.")
    ] = None,
) -> None:
    """The Kaplan–Meier table of server lives until a wedge (recycled and end-of-run lives
    censored), the recycling interval at which the chosen share of lives had wedged with its 95%
    confidence interval, and the line to put in a config."""
    from wedgewatch.analysis import lives
    from wedgewatch.ledger import queries

    if by is not None and by not in lives.AXES:
        raise BadInput(f"--by: {by!r} is not one of {', '.join(lives.AXES)}")
    if not 0.0 < risk < 1.0:
        raise BadInput(f"--risk: {risk} must be between 0 and 1 (for example 0.05)")
    with open_ledger(ledger) as lg:
        wanted: list[str | None] = list(run_ids) if run_ids else [None]
        found = [queries.resolve_any(lg, r) for r in wanted]
        runs = [str(row["harness_run_id"] if w else row["run_id"]) for w, row in found]
        wrapped = [rid for (w, _), rid in zip(found, runs, strict=True) if w]
        if by is None:
            by = "requests" if wrapped else "instances"
        elif by == "instances" and wrapped:
            # A wrapped harness's instances end in its own files; no life counts them.
            raise BadInput(
                f"--by instances: {wrapped[0]} is a wrapped run, which has no attempts to count a "
                "life's finished instances by: use --by requests or --by tokens"
            )
        sv = lives.survival_by(lg, runs, by)
    iv = lives.interval(sv, risk)
    if plot is not None:
        from wedgewatch.analysis.plots import survival as curve

        uri = curve([(", ".join(runs), sv)])
        if uri is None:
            raise BadInput(f"--plot: no server life of {', '.join(runs)} became ready: nothing to draw")
        try:
            plot.write_bytes(base64.b64decode(uri.split(",", 1)[1]))
        except OSError as exc:
            raise BadInput(f"--plot: {plot}: {exc.strerror or exc}") from None
    if json_out:
        out = {"runs": runs, "survival": sv.as_dict(), "recycling": iv, "sentence": lives.sentence(sv, iv)}
        typer.echo(json.dumps(out, indent=2))
        return
    typer.echo(lives.render_text(sv, iv))
