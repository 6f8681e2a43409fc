"""``wedgewatch scan FILE... [--json] [--timeout-hint S]``: forensics on other harnesses' files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli._app import app


@app.command("scan")
def scan_cmd(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Result files: SWE-bench reports and predictions, mini-swe-agent trajectories and "
            "preds.json (or their directory), wedgewatch results, generic JSONL/JSON/CSV with a "
            "duration and a status per instance. Files are joined on the instance id."
        ),
    ],
    timeout_hint: Annotated[
        list[float] | None,
        typer.Option(
            "--timeout-hint",
            help="A client timeout in seconds the harness may have used (repeatable); 600 s, the "
            "OpenAI SDK's default, is always considered.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
) -> None:
    """Find client timeouts scored as model failures: durations clustered at k x T + backoff,
    exit statuses naming timeouts or API errors, empty patches beside them; and the score with
    those instances counted as infrastructure failures. Exit 2 on an unreadable or unknown file."""
    from wedgewatch.analysis.scan import render_text, scan

    for h in timeout_hint or []:
        if not h > 0:
            raise BadInput(f"--timeout-hint: {h:g} is not a positive number of seconds")
    result = scan(files, timeout_hint)
    typer.echo(json.dumps(result, indent=2) if json_out else render_text(result))
