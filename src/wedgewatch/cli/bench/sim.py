"""``wedgewatch bench sim``: the simulator itself under load (docs/simulator.md quotes it)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli.bench import bench_app


@bench_app.command("sim")
def bench_sim(
    streams: Annotated[int, typer.Option("--streams", help="Concurrent streams.")] = 64,
    tokens: Annotated[int, typer.Option("--tokens", help="Tokens per request.")] = 256,
    rate: Annotated[float, typer.Option("--rate", help="Tokens/s per stream.")] = 200.0,
    rounds: Annotated[int, typer.Option("--rounds", help="Requests per stream, back to back.")] = 2,
) -> None:
    """Tokens/s delivered against the ideal, TTFT and inter-token latency seen by an aiohttp
    client, and the simulator's CPU per token; one JSON object."""
    from wedgewatch.bench.sim import run

    if streams < 1 or tokens < 1 or rate <= 0 or rounds < 1:
        raise BadInput("--streams/--tokens/--rate/--rounds: need positive numbers")
    typer.echo(json.dumps(run(streams, tokens, rate, rounds)))
