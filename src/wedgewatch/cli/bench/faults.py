"""``wedgewatch bench faults``: the fault corpus of docs/faults.md, each fault run N times at the
default settings, and the table that page shows."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli.bench import bench_app


@bench_app.command("faults")
def bench_faults(
    trials: Annotated[int, typer.Option("--trials", help="Trials of each fault.")] = 3,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            "--fault",
            metavar="NAME",
            help="Only this fault (its name in the table, e.g. 'vLLM #46811'); repeatable.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the rows and every trial as JSON.")] = False,
) -> None:
    """Each fault of the corpus (public reports against vLLM, SGLang, llama.cpp and mlx-lm, the
    broken replies, the slow client) met on the simulator through the supervised stack, every
    setting of wedgewatch at its default: what it did, the request's outcome, and the seconds from
    the fault to the client's release (median and range over the trials)."""
    from wedgewatch.bench import faults
    from wedgewatch.bench.fault_corpus import CORPUS

    names = list(fault or [])
    unknown = [n for n in names if n not in {f.name for f in CORPUS}]
    if trials < 1 or unknown:
        raise BadInput(
            f"--trials: needs 1 or more, got {trials}"
            if trials < 1
            else f"--fault: no fault {unknown[0]!r} (the corpus: {', '.join(f.name for f in CORPUS)})"
        )
    started = time.strftime("%Y-%m-%d")
    with tempfile.TemporaryDirectory(prefix="ww-bench-faults-") as tmp:
        rows = asyncio.run(faults.run(Path(tmp), trials, names))
    if json_out:
        typer.echo(json.dumps({"date": started, "trials": trials, "rows": rows}, indent=2, default=str))
        return
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    typer.echo(f"wedgewatch bench faults --trials {trials} ({started}; load average after: {load})")
    typer.echo("every wedgewatch setting at its default; seconds from the fault to the client's release\n")
    for line in faults.table(rows):
        typer.echo(line)
