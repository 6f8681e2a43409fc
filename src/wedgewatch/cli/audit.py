"""``wedgewatch audit RESULTS... [--ledger L] [--suite FILE] [--json] [--rerun-out FILE]``: a
wrapped harness's results against the request rows of its runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.base.files import write_private
from wedgewatch.base.vocab import INFRA_FAILED
from wedgewatch.cli._app import app


@app.command("audit")
def audit_cmd(
    results: Annotated[
        list[Path],
        typer.Argument(
            help="The harness's result files or directories (mini-swe-agent output dir, preds.json, "
            "trajectories, SWE-bench reports, generic JSONL/CSV), as `scan` reads them."
        ),
    ],
    ledger: Annotated[Path, typer.Option(help="The ledger `wrap` wrote.")] = Path("wedgewatch.sqlite"),
    suite: Annotated[
        Path | None,
        typer.Option(
            help="The suite (JSON/JSONL, or a directory of them): the denominator, and "
            "problem statements to match requests by content."
        ),
    ] = None,
    harness_run: Annotated[
        str | None, typer.Option(help="Count every file as written by this wrapped run (default: by time).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the audit as JSON.")] = False,
    rerun_out: Annotated[
        Path | None,
        typer.Option(
            help="Write the infra_failed instances in the harness's selection syntax, for `wrap --rerun`."
        ),
    ] = None,
    rerun_format: Annotated[
        str | None,
        typer.Option(
            help="miniswe (--filter regex), swebench (--instance_ids), inspect (--sample-id), ids "
            "(default: from the results' kind)."
        ),
    ] = None,
) -> None:
    """Per instance: the harness's verdict, the requests that served it (by tag, header or content
    fingerprint), whether any stalled, failed upstream or met a restart, and its outcome
    (infra_failed when the server broke it, recovered when the harness sent the failed request
    again and it succeeded). Then the published score and the honest one, each
    with a 95% interval, and infra_failed and recovered beside. Exit 1 when failed requests could
    not be attributed to one instance (the honest score is then not known): the line names the
    flag that would attribute them."""
    from wedgewatch.analysis.audit import audit, render_text, rerun_lines

    result = audit(results, ledger, suite, harness_run)
    if rerun_out is not None:
        lines = rerun_lines(result[INFRA_FAILED], rerun_format or result["rerun_format"])
        try:
            write_private(rerun_out, "".join(line + "\n" for line in lines))
        except OSError as exc:
            raise BadInput(f"--rerun-out: {rerun_out}: {exc.strerror or exc}") from None
    typer.echo(json.dumps(result, indent=2) if json_out else render_text(result))
    unknown = result["attribution"]["message"]
    if unknown:
        # Printed in full above; the exit code keeps a script from taking the score as honest.
        typer.echo(f"wedgewatch audit: {unknown}", err=True)
        raise typer.Exit(1)
