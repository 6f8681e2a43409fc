"""The live progress display of a run (rich, on stderr): instances done / running / retried,
attempts and API errors, the server life and its age, stalls and restarts so far."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from rich.console import Console
from rich.live import Live
from rich.table import Table

from wedgewatch.runner.state import RunContext

REFRESH = 0.5  # seconds between redraws: fast enough to watch, cheap at 64 attempts at a time


def render(ctx: RunContext, started: float) -> Table:
    c = ctx.counters
    life = ctx.server.life()
    table = Table(title=f"wedgewatch run {ctx.run_id}", show_header=False, box=None, padding=(0, 2))
    done = c.final_before + c.done
    table.add_row("instances", f"{done}/{c.total} done, {c.running} running, {c.retried} retried")
    table.add_row("attempts", f"{c.attempts} started, {c.api_errors} api_error, {c.evaluations} evaluations")
    if life is not None:
        table.add_row(
            "server life",
            f"{life.life_id}  age {life.age_seconds:.0f}s, {life.age_requests} requests, {life.age_tokens} tokens",
        )
    else:
        table.add_row("server life", "starting…")
    table.add_row("stalls / restarts", f"{c.stalls} / {c.restarts}")
    table.add_row("elapsed", f"{time.monotonic() - started:.0f}s")
    return table


@contextlib.asynccontextmanager
async def live(ctx_holder: list[RunContext], enabled: bool) -> AsyncIterator[None]:
    """Redraw while the body runs. ``ctx_holder`` is filled once the run's context exists."""
    if not enabled:
        yield
        return
    console = Console(stderr=True)
    started = time.monotonic()
    with Live(console=console, refresh_per_second=4, transient=False) as display:

        async def refresh() -> None:
            while True:
                if ctx_holder:
                    display.update(render(ctx_holder[0], started))
                await asyncio.sleep(REFRESH)

        task = asyncio.create_task(refresh())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if ctx_holder:
                display.update(render(ctx_holder[0], started))
