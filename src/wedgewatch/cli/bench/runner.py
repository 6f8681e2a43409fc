"""``wedgewatch bench runner``: the runner's own overhead, ledger writes/s, RSS and report time."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli.bench import bench_app


@bench_app.command("runner")
def bench_runner(
    sizes: Annotated[str, typer.Option("--sizes", help="Suite sizes, comma-separated.")] = "200,2000",
    concurrency: Annotated[int, typer.Option("--concurrency", help="Instances at a time.")] = 64,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """2,000 instances of a trivial simulated task (the echo agent) at concurrency 64 against the
    simulator: the runner's own overhead per attempt, ledger writes/s, peak RSS at 200 and 2,000
    instances, and the time `report` takes. Targets: overhead <= 5 ms, RSS growth < 20%."""
    from wedgewatch.bench.runner import TARGET_OVERHEAD_MS, TARGET_RSS_GROWTH, judge, run

    try:
        ns = [int(x) for x in sizes.split(",") if x.strip()]
    except ValueError:
        raise BadInput(f"--sizes: {sizes!r} is not a comma-separated list of numbers") from None
    if not ns or min(ns) < 1 or concurrency < 1:
        raise BadInput("--sizes/--concurrency: need positive numbers")
    results = run(ns, concurrency)
    verdict = judge(results)
    growth = verdict["rss_growth"]
    if json_out:
        typer.echo(json.dumps({"results": results, **verdict}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"wedgewatch bench runner (echo agent, concurrency {concurrency}, simulator)")
    for col in ("instances", "wall s", "attempts/s", "runner CPU ms/attempt mean / p50 / p99",
                "runner wall ms mean / p99", "sandbox ms", "agent ms", "ledger rows/s run (capacity)",
                "peak RSS MiB", "report ms (CLI s)"):  # fmt: skip
        t.add_column(col, justify="right")
    for r in results:
        t.add_row(
            str(r["instances"]),
            f"{r['wall_s']:.1f}",
            f"{r['attempts_per_s']:.1f}",
            f"{r['overhead_ms_mean']:.2f} / {r['overhead_ms_p50']:.2f} / {r['overhead_ms_p99']:.2f}",
            f"{r['overhead_wall_ms_mean']:.1f} / {r['overhead_wall_ms_p99']:.0f}",
            f"{r['sandbox_ms_mean']:.0f}",
            f"{r['agent_ms_mean']:.0f}",
            f"{r['ledger_rows_per_s']:.0f} ({r['ledger_capacity_rows_per_s']:.0f})",
            f"{r['peak_rss_mib']:.0f}",
            f"{r['report_ms']:.0f} ({r['report_cli_s']:.1f})",
        )
    Console(width=max(Console().width, 160)).print(t)
    typer.echo(
        f"overhead target <= {TARGET_OVERHEAD_MS} ms/attempt: {'met' if verdict['overhead_ok'] else 'MISSED'}; "
        f"RSS growth {results[0]['instances']} -> {results[-1]['instances']}: {growth:+.1%} "
        f"(target < {TARGET_RSS_GROWTH:.0%}: {'met' if verdict['rss_ok'] else 'MISSED'})"
    )
