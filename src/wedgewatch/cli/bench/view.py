"""``wedgewatch bench view``: what a live page of ``wedgewatch view`` costs with many streams in
flight (docs/view.md quotes it)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli.bench import bench_app


@bench_app.command("view")
def bench_view(
    streams: Annotated[int, typer.Option("--streams", help="Streams kept in flight.")] = 256,
    seconds: Annotated[
        float, typer.Option("--seconds", help="Seconds the page's connection is read.")
    ] = 20.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Bytes per second of one page's live events, the view's and the proxy's CPU, with STREAMS
    requests in flight through the proxy."""
    from wedgewatch.bench.view import render, run

    if streams < 1 or seconds < 1:
        raise BadInput("--streams/--seconds: need at least 1")
    result = run(streams, seconds)
    typer.echo(json.dumps(result, indent=1) if as_json else render(result))
