"""``wedgewatch bench scale``: instances per minute and the runner's cost per attempt on a pool of
servers, by executor and ledger, and what an idle pool of N members costs the driver
(docs/benchmarks.md, docs/scale-out.md)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli.bench import bench_app


def _ints(flag: str, text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInput(f"{flag}: {text!r} is not a comma-separated list of numbers") from None
    if any(v < 1 for v in values):
        raise BadInput(f"{flag}: {text!r}: every number must be at least 1")
    return values


@bench_app.command("scale")
def bench_scale(
    servers: Annotated[str, typer.Option("--servers", help="Pool sizes, comma-separated.")] = "1,2,4",
    executor: Annotated[
        list[str] | None, typer.Option("--executor", help="Executor (repeat): local, ray. Default local.")
    ] = None,
    ledger: Annotated[
        list[str] | None,
        typer.Option("--ledger", help="Ledger (repeat): sqlite, or a postgresql:// URL. Default sqlite."),
    ] = None,
    instances: Annotated[int, typer.Option("--instances", help="Instances per run.", min=1)] = 48,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Instances at a time.", min=1)] = 16,
    rate: Annotated[
        float, typer.Option("--rate", help="Each simulator's tokens/s per stream.", min=0.1)
    ] = 8.0,
    idle: Annotated[
        str, typer.Option("--idle", help="Idle pool sizes, comma-separated; '' for none.")
    ] = "1,16,64",
    idle_seconds: Annotated[
        float, typer.Option("--idle-seconds", help="Seconds each idle pool is watched.", min=1)
    ] = 30.0,
) -> None:
    """Runs of the trivial echo task on pools of 1, 2 and 4 simulators (4 streams each, a second
    per request): instances per minute and the runner's CPU per attempt, per executor and ledger;
    then idle pools of N members: the driver's CPU per second, ledger rows per second, start-up
    time and RSS. One JSON object on stdout; progress on stderr."""
    from wedgewatch.bench.scale import run
    from wedgewatch.ledger.target import backend_of
    from wedgewatch.runner import executors

    sizes = _ints("--servers", servers)
    idle_sizes = _ints("--idle", idle) if idle.strip() else []
    chosen = executor or ["local"]
    for name in chosen:
        if name not in executors.REGISTRY:
            raise BadInput(
                f"--executor: unknown executor {name!r} (known: {', '.join(sorted(executors.REGISTRY))})"
            )
    ledgers = ledger or ["sqlite"]
    for target in ledgers:
        if target != "sqlite" and backend_of(target) != "postgresql":
            raise BadInput(f"--ledger: {target!r} is neither sqlite nor a postgresql:// URL")
    doc = run(
        sizes,
        chosen,
        ledgers,
        instances,
        concurrency,
        rate,
        idle_sizes,
        idle_seconds,
        say=lambda line: typer.echo(line, err=True),
    )
    typer.echo(json.dumps(doc, indent=1))
