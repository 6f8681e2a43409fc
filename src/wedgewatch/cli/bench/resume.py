"""``wedgewatch bench resume``: tasks lost per wedge with the proxy's resume on and off, side by
side in one run, and each resumed task's added wall-clock (``bench/resume.py``)."""

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


@bench_app.command("resume")
def bench_resume(
    trials: Annotated[int, typer.Option("--trials", help="Trials of each arm (on_wedge resume, fail).")] = 3,
    tasks: Annotated[int, typer.Option("--tasks", help="Tasks of the harness in each trial.")] = 16,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Tasks at a time.")] = 8,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the summary and every trial as JSON.")
    ] = False,
) -> None:
    """A harness on the OpenAI SDK (tasks of a tool call and an answer, chat and Responses,
    streamed and not) against a supervised simulator that wedges once mid-run, every wedgewatch
    setting at its default, with ``on_wedge = "resume"`` and ``"fail"`` in alternate trials: the
    tasks each wedge lost, the tasks it struck, the requests resumed, and each struck task's added
    wall-clock (detection, restart, the request going on), medians and ranges."""
    from wedgewatch.bench import resume

    if trials < 1 or tasks <= concurrency or concurrency < 1:
        raise BadInput(
            f"--trials: needs 1 or more, got {trials}"
            if trials < 1
            else f"--tasks ({tasks}) must be more than --concurrency ({concurrency}), which needs 1 or more:"
            " the wedge strikes the task that starts once the first are under way"
        )
    started = time.strftime("%Y-%m-%d")
    runs: list[resume.Trial] = []
    with tempfile.TemporaryDirectory(prefix="ww-bench-resume-") as tmp:
        for n in range(trials):
            for arm in resume.ARMS:  # side by side: the arms alternate
                workdir = Path(tmp) / f"{arm}-{n}"
                workdir.mkdir()
                runs.append(asyncio.run(resume.trial(workdir, arm, tasks, concurrency)))
    summ = resume.summary(runs)
    if json_out:
        out = {"date": started, "trials": trials, "summary": summ, "runs": [vars(t) for t in runs]}
        typer.echo(json.dumps(out, indent=2))
        return
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    typer.echo(f"wedgewatch bench resume --trials {trials} ({started}; load average after: {load})")
    typer.echo(
        f"{tasks} tasks of a tool call and an answer, {concurrency} at a time (chat and Responses, streamed"
        " and not, OpenAI SDK defaults); one wedge mid-run; every wedgewatch setting at its default\n"
    )
    for line in resume.table(summ):
        typer.echo(line)
