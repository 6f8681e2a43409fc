"""``wedgewatch bench llamacpp``: the real llama.cpp server (xllamacpp launcher, bundled Gemma 3
270M) measured on this machine; docs/real-servers.md quotes the figures."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli.bench import bench_app


@bench_app.command("llamacpp")
def bench_llamacpp(
    threads: Annotated[int, typer.Option("--threads", help="CPU threads of the server.")] = 2,
    tokens: Annotated[int, typer.Option("--tokens", help="Tokens per stream.")] = 256,
    parallel: Annotated[int, typer.Option("--parallel", help="Slots, and concurrent streams.")] = 4,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Ready time; tokens/s for one stream and for --parallel streams; /health while busy and while
    frozen (SIGSTOP); `: ping` comments during a long prefill; how fast a client's disconnect stops
    generation; what SIGTERM mid-stream does. Takes about a minute."""
    from wedgewatch.bench.llamacpp import run

    if threads < 1 or tokens < 2 or parallel < 1:
        raise BadInput("--threads/--tokens/--parallel: need positive numbers (tokens >= 2)")
    with tempfile.TemporaryDirectory(prefix="ww-bench-llamacpp-") as tmp:
        figures = asyncio.run(run(Path(tmp), threads, tokens, parallel))
    if json_out:
        typer.echo(json.dumps(figures, indent=2))
        return
    width = max(len(k) for k in figures)
    typer.echo("wedgewatch bench llamacpp (xllamacpp, bundled Gemma 3 270M Q4_K_M)")
    for key, value in figures.items():
        typer.echo(f"  {key:<{width}}  {value}")
