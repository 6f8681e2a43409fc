"""``wedgewatch bench detection``: false alarms and time to a verdict at the default windows, on
the simulator and on the real llama.cpp; docs/benchmarks.md quotes the figures."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli.bench import bench_app


def _print_sim(figures: dict[str, Any], scale: float) -> None:
    h = figures["healthy"]
    typer.echo(f"wedgewatch bench detection (simulator at {scale:g}x; seconds are the server's)")
    typer.echo(f"load average before/after: {figures['load_average']}")
    typer.echo("\n(a) healthy mixed workload")
    for key, value in h.items():
        typer.echo(f"  {key:<28} {value}")
    typer.echo("\n(b) wedge kinds: p50 / p99 / max seconds from the last beat or token\n")
    typer.echo("| kind | to the verdict | to the client's error | missed |")
    typer.echo("|---|---|---|---|")
    names = {"prefill": "engine stops during a prefill", "midstream": "engine stops mid-stream"}
    names["stuck"] = "one request stuck, engine stepping"
    for kind, label in names.items():
        typer.echo(_row(label, figures["wedges"][kind]))
    typer.echo(f"\n  restarts for the stuck requests: {figures['wedges']['stuck']['restarts']}")


def _row(name: str, t: dict[str, Any]) -> str:
    def cell(p: dict[str, Any]) -> str:
        return "-" if not p.get("n") else f"{p['p50']} / {p['p99']} / {p['max']} (n {p['n']})"

    return f"| {name} | {cell(t['verdict'])} | {cell(t['client_error'])} | {t['missed']} |"


@bench_app.command("detection")
def bench_detection(
    scale: Annotated[float, typer.Option("--time-scale", help="Simulator time scale.")] = 5.0,
    requests: Annotated[int, typer.Option("--requests", help="Short requests of the healthy run.")] = 2000,
    longs: Annotated[int, typer.Option("--long-prefills", help="60 s prefills in the healthy run.")] = 20,
    clients: Annotated[int, typer.Option("--clients", help="Clients sending short requests.")] = 10,
    trials: Annotated[int, typer.Option("--trials", help="Trials of each wedge kind.")] = 20,
    llamacpp_trials: Annotated[
        int, typer.Option("--llamacpp-trials", help="SIGSTOP trials of each kind on llama.cpp; 0: skip it.")
    ] = 3,
    threads: Annotated[int, typer.Option("--threads", help="CPU threads of the llama.cpp server.")] = 2,
    sim: Annotated[bool, typer.Option("--sim/--no-sim", help="Run the simulator part.")] = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """(a) A healthy mixed workload (queueing at the cap, 60 s prefills, preemptions): false
    alarms. (b) Each wedge kind many times: seconds (server time) from the last beat or token to
    the verdict and to the client's error. Then the same two checks on the real llama.cpp."""
    from wedgewatch.bench import detection

    if scale <= 0 or requests < 1 or longs < 0 or clients < 1 or trials < 1 or llamacpp_trials < 0:
        raise BadInput("--time-scale/--requests/--long-prefills/--clients/--trials: need positive numbers")
    with tempfile.TemporaryDirectory(prefix="ww-bench-detection-") as tmp:
        figures: dict[str, Any] = {}
        if sim:
            figures = asyncio.run(detection.run(Path(tmp), scale, requests, longs, clients, trials))
        if llamacpp_trials:
            from wedgewatch.bench import detection_llamacpp

            figures["llamacpp"] = asyncio.run(
                detection_llamacpp.run(Path(tmp) / "llama", threads, llamacpp_trials)
            )
    if json_out:
        typer.echo(json.dumps(figures, indent=2))
        return
    if sim:
        _print_sim(figures, scale)
    if "llamacpp" in figures:
        ll = figures["llamacpp"]
        typer.echo("\nreal llama.cpp (xllamacpp, Gemma 3 270M), real seconds")
        for key, value in ll["healthy"].items():
            typer.echo(f"  {key:<28} {value}")
        typer.echo("\n| kind | to the verdict | to the client's error | missed |")
        typer.echo("|---|---|---|---|")
        typer.echo(_row("SIGSTOP during a long prompt", ll["sigstop_prompt"]))
        typer.echo(_row("SIGSTOP mid-stream", ll["sigstop_midstream"]))
        early = ll["sigstop_prompt"]["false_before_stop"] + ll["sigstop_midstream"]["false_before_stop"]
        typer.echo(
            f"\n  false wedges before a SIGSTOP: {early}; load average before/after: {ll['load_average']}"
        )
