"""Deadlines and restart backoff on the manual clock: the proxy's first-token and mid-stream
deadlines, the supervisor's backoff between failed starts and its wedge window fire when the test
moves the clock, in no real seconds, against real sockets and real processes."""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp
import openai
import pytest

from conftest import RunningServer
from wedgewatch.base.errors import ServerStartError
from wedgewatch.base.events import Wedged
from wedgewatch.config import ServerConfig, WarmupConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.supervisor import Supervisor
from wedgewatch.testing import ManualClock, ScriptedUpstream, eventually_async, settle
from wedgewatch.wire.heartbeat import Reading


async def test_manual_clock_fires_timers_and_sleepers_in_order_and_honours_cancel() -> None:
    clock = ManualClock(start=0.0)
    fired: list[tuple[str, float]] = []
    clock.call_later(5, lambda: fired.append(("b", clock())))
    clock.call_later(2, lambda: fired.append(("a", clock())))
    clock.call_later(3, lambda: fired.append(("never", clock()))).cancel()

    async def sleeper() -> None:
        await clock.sleep(4)
        fired.append(("slept", clock()))

    task = asyncio.create_task(sleeper())
    await settle()
    await clock.advance(3.9)
    assert fired == [("a", 2.0)] and clock() == 3.9
    await clock.advance(10)
    await task
    assert fired == [("a", 2.0), ("slept", 4.0), ("b", 5.0)]
    assert clock.pending() == 0


@pytest.mark.parametrize(
    ("word", "field", "kind"),
    [("HANG", "ttft_timeout", "stall_ttft"), ("STALL", "stall_timeout", "stall_midstream")],
)
async def test_a_proxy_deadline_fires_on_the_manual_clock_not_before(
    tmp_path: Path, word: str, field: str, kind: str
) -> None:
    clock = ManualClock()
    up = ScriptedUpstream()
    watchdog = WatchdogConfig(ttft_timeout=60, stall_timeout=20, total_timeout=600)
    window = getattr(watchdog, field)
    async with up.serve() as url:
        ledger = Ledger(tmp_path / "l.sqlite")
        proxy = Proxy(f"{url}/v1", watchdog, ledger=ledger, clock=clock)
        await proxy.start()
        try:
            client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0, timeout=30)

            async def ask() -> None:
                stream = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": word}], stream=True
                )
                async for _ in stream:
                    pass

            call = asyncio.create_task(ask())
            await eventually_async(lambda: len(up.seen) == 1 and clock.pending() >= 1, what="armed")
            if word == "STALL":  # the first token has reached the proxy: its deadline moved
                await eventually_async(lambda: proxy.status()["in_flight"][0]["tokens_out"] == 1)
            await clock.advance(window - 0.5)
            await asyncio.sleep(0.2)  # real time passes too: nothing may fire on it
            assert not call.done() and proxy.in_flight() == 1
            await clock.advance(1.0)
            with pytest.raises(openai.APIError) as err:
                await asyncio.wait_for(call, 10)
            assert err.value.code == kind
            await asyncio.wait_for(up.hung_up.wait(), 5)  # aborted upstream
            row = ledger.query("SELECT outcome FROM requests")[0]
            assert row["outcome"] == kind
        finally:
            await proxy.stop()


async def test_restart_backoff_waits_on_the_supervisors_clock(tmp_path: Path) -> None:
    # A server that exits at once: start, fail, back off 30 s, start again, give up. The 30 s are
    # the manual clock's: the second start happens only when the test moves it. The starter polls
    # the starting server on the same clock, so the test moves it until each start has failed.
    clock = ManualClock()
    script = "import sys; sys.exit(3)"
    cfg = ServerConfig(
        profile="command",
        command=[sys.executable, "-c", script],
        port=1,  # never listened on: the process exits first
        log_dir=str(tmp_path / "logs"),
        restart_backoff=30.0,
        max_restarts=1,
        startup_timeout=600.0,  # manual seconds: the process's real exit ends each start
    )
    ledger = Ledger(tmp_path / "l.sqlite")
    sup = Supervisor(cfg, ledger=ledger, clock=clock)
    starting = asyncio.create_task(sup.start())

    def lives() -> int:
        return int(ledger.query("SELECT COUNT(*) FROM server_lives")[0][0])

    def failed() -> int:
        return int(ledger.query("SELECT COUNT(*) FROM events WHERE kind = 'start_failed'")[0][0])

    async def first_start_failed() -> bool:
        if failed() == 1:
            return clock.pending() >= 1  # the back-off's sleep
        await clock.advance(0.5)  # the starter's next look at the server
        return False

    await eventually_async(first_start_failed, what="first start failed")
    await asyncio.sleep(0.3)
    assert lives() == 1 and not starting.done()  # waiting on the clock, not on real time
    await clock.advance(29.0)
    assert lives() == 1
    await clock.advance(1.5)

    async def gave_up() -> bool:
        if not starting.done():
            await clock.advance(0.5)  # the second start's looks at the server
        return starting.done()

    await eventually_async(gave_up, timeout=20, what="gave up")
    with pytest.raises(ServerStartError, match="gave up after 1 restarts"):
        await starting
    assert lives() == 2


async def test_the_starter_waits_for_readiness_on_the_supervisors_clock(tmp_path: Path) -> None:
    # A server that never answers: the start-up deadline is 60 s of the manual clock, and the
    # starter's polls between two looks sleep on it too (a sleep on the loop would leave no sleeper
    # here, and spin in real time against a deadline that never comes).
    clock = ManualClock()
    cfg = ServerConfig(
        profile="command",
        command=[sys.executable, "-c", "import time; time.sleep(600)"],
        port=1,  # never listened on
        log_dir=str(tmp_path / "logs"),
        max_restarts=0,
        startup_timeout=60.0,
    )
    sup = Supervisor(cfg, clock=clock)
    starting = asyncio.create_task(sup.start())
    await eventually_async(lambda: clock.pending() >= 1, what="the starter sleeps on the clock")
    assert not starting.done()
    await clock.advance(61.0)
    with pytest.raises(ServerStartError, match="not ready after 60s"):
        await asyncio.wait_for(starting, 20)


async def test_a_wedge_is_found_at_the_first_scrape_past_its_window_on_the_supervisors_clock(
    tmp_path: Path, start_sim: Callable[..., RunningServer]
) -> None:
    # A real simulator wedged by a request (two tokens, then its counters freeze with the request
    # running); the supervisor watching it scrapes on the manual clock, one step of 1 s at a time:
    # the verdict comes at the scrape 5 s (wedge_window) after the one that saw the last tokens.
    scenario = tmp_path / "wedge.toml"
    scenario.write_text('[[fault]]\nwhen.contains = "WEDGE"\naction = "wedge"\nafter_tokens = 2\n')
    sim, clock = start_sim("--scenario", str(scenario)), ManualClock()
    cfg = ServerConfig(
        profile="external",
        url=sim.url,
        scrape_interval=1.0,
        wedge_window=5.0,
        restart_on_wedge=False,
        warmup=WarmupConfig(count=0),
        log_dir=str(tmp_path / "logs"),
    )
    sup = Supervisor(cfg, clock=clock)
    readings: list[Reading] = []
    sup.feed.subscribe(lambda r, _life: readings.append(r), lambda *_: None)
    wedges: list[tuple[float, Wedged]] = []
    sup.bus.subscribe(lambda ev: wedges.append((clock(), ev)) if isinstance(ev, Wedged) else None)
    await sup.start()
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "WEDGE"}], "stream": True}
    try:
        # The watcher's first scrape is done (the server idle) before the request is sent.
        await eventually_async(lambda: readings and clock.pending() >= 1, what="the watcher asleep")
        async with aiohttp.ClientSession() as s:
            request = asyncio.ensure_future(s.post(sim.url + "/v1/chat/completions", json=body))

            async def wedged() -> bool:
                async with s.get(sim.url + "/sim/stats") as r:
                    return bool((await r.json())["wedged"])

            await eventually_async(wedged, what="the simulator wedged")

            async def step() -> None:
                """One scrape interval, then until the watcher sleeps again (or has its verdict)."""
                await clock.advance(1.0)
                await eventually_async(lambda: clock.pending() >= 1 or wedges, what="the scrape done")

            for _ in range(12):
                if wedges:
                    break
                await step()
            request.cancel()
    finally:
        await sup.stop()
    assert wedges, "no wedge in 12 scrapes"
    at, ev = wedges[0]
    moved = [b for a, b in itertools.pairwise(readings) if b.tokens != a.tokens]
    assert moved, "the scrapes saw the two tokens come"
    assert ev.evidence["rule"] == "tokens" and ev.evidence["source"] == "metrics"
    assert at - moved[-1].at == 5.0  # not a scrape sooner, not a scrape later
    assert ev.evidence["flat_seconds"] == 5.0
