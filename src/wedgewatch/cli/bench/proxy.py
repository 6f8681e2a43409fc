"""``wedgewatch bench proxy``: the watchdog proxy against going direct, and its stall detection."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli.bench import bench_app


@bench_app.command("proxy")
def bench_proxy(
    levels: Annotated[str, typer.Option(help="Concurrent streams, comma-separated.")] = "1,16,64,256",
    repeats: Annotated[int, typer.Option(help="Interleaved repeats per level (medians are shown).")] = 3,
    duration: Annotated[float, typer.Option(help="Measured seconds per run.")] = 3.0,
    warmup: Annotated[float, typer.Option(help="Unmeasured seconds before each run.")] = 1.0,
    detection: Annotated[bool, typer.Option(help="Also measure stall detection.")] = True,
    pin: Annotated[
        bool, typer.Option(help="Give the proxy a CPU of its own (the others to the simulator and load).")
    ] = True,
    peers: Annotated[
        str, typer.Option(help="Other proxies to measure in the same runs, comma-separated: nginx.")
    ] = "",
    view: Annotated[
        bool,
        typer.Option("--view", help="Also measure each level with a live page of wedgewatch view attached."),
    ] = False,
    api: Annotated[
        str,
        typer.Option(help="The API the throughput runs stream: chat, responses or messages (Anthropic's)."),
    ] = "chat",
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Throughput, latency and CPU of the proxy against going direct to a fast simulator, and how
    quickly it detects each stall kind; with --peers, nginx measured the same way (docs/benchmarks.md)."""
    from wedgewatch.bench.peers import names
    from wedgewatch.bench.proxy import BenchOptions, run
    from wedgewatch.bench.proxy_table import render

    try:
        lv = [int(x) for x in levels.split(",") if x.strip()]
    except ValueError:
        raise BadInput(f"--levels: expected comma-separated integers, got {levels!r}") from None
    if repeats < 1:
        raise BadInput("--repeats: must be >= 1")
    if duration <= 0 or warmup < 0:
        raise BadInput("--duration: must be > 0 (and --warmup >= 0)")
    if api not in ("chat", "responses", "messages"):
        raise BadInput(f"--api: expected chat, responses or messages, got {api!r}")
    result = run(
        BenchOptions(
            levels=lv,
            repeats=repeats,
            duration=duration,
            warmup=warmup,
            detection=detection,
            pin=pin,
            peers=names(peers),
            view=view,
            api=api,
        )
    )
    typer.echo(json.dumps(result, indent=1) if as_json else render(result))
