"""The stack (supervised simulator behind the proxy) across a restart: requests that arrive while
a wedged life is replaced wait for the next ready life and go through. Real subprocesses, real
sockets, real SQLite."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from wedgewatch.base.events import Event
from wedgewatch.config import ServerConfig, WarmupConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.stack.servers import Stack
from wedgewatch.supervisor.process import group_alive
from wedgewatch.testing import eventually_async

WEDGE_ONCE = """
[[fault]]
when.contains = "WEDGE"
times = 1
action = "wedge"
after_tokens = 2
"""


def server_config(tmp_path: Path) -> ServerConfig:
    (tmp_path / "wedge.toml").write_text(WEDGE_ONCE)
    return ServerConfig(
        profile="sim",
        scenario=str(tmp_path / "wedge.toml"),
        time_scale=20.0,
        log_dir=str(tmp_path / "logs"),
        scrape_interval=0.25,
        wedge_window=1.5,
        canary_timeout=1.0,
        startup_timeout=20.0,
        stop_grace=3.0,
        restart_backoff=0.1,
        warmup=WarmupConfig(timeout=10.0),
    )


async def ask(session: aiohttp.ClientSession, url: str, text: str) -> tuple[int, dict[str, Any]]:
    body = {"model": "sim-model", "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        return resp.status, await resp.json()


async def through_a_restart(tmp_path: Path, restart_wait: float) -> tuple[list[int], Ledger, str, str]:
    """Wedge the first life; the moment the supervisor announces the restart, send 4 requests.
    Returns their statuses, the ledger, the first life and the life that followed."""
    ledger = Ledger(tmp_path / "ledger.sqlite")
    # The requests ask for one answer, not a stream: only total_timeout watches them (docs/proxy.md),
    # and it ends the wedged one before the wedge window (1.5 s) has passed.
    watchdog = WatchdogConfig(total_timeout=1.0, restart_wait=restart_wait)
    stack = Stack(server_config(tmp_path), watchdog, ledger=ledger)
    late: list[asyncio.Task[tuple[int, dict[str, Any]]]] = []
    async with stack, aiohttp.ClientSession() as session:
        first = stack.supervisor.life_id
        assert first is not None

        def on_event(ev: Event) -> None:
            if ev.kind == "restart" and not late:
                # Published as the old life is taken away: these arrive during the restart.
                late.extend(asyncio.ensure_future(ask(session, stack.url, f"late {n}")) for n in range(4))

        stack.bus.subscribe(on_event)
        status, _ = await ask(session, stack.url, "WEDGE now")
        assert status == 503, "the wedged request itself fails (it was in flight on the wedged life)"
        async with asyncio.timeout(30):
            await eventually_async(lambda: late, timeout=30, what="the restart announced")
            results = await asyncio.gather(*late)
            await stack.supervisor.wait_ready()
        second = stack.supervisor.life_id
        (pid,) = [r[0] for r in ledger.query("SELECT pid FROM server_lives WHERE life_id = ?", (second,))]
    assert pid is not None and not group_alive(pid), "the stack's stop ended the server's group"
    assert second is not None and second != first
    return [s for s, _ in results], ledger, first, second


def test_requests_during_a_restart_wait_for_the_next_life(tmp_path: Path) -> None:
    statuses, ledger, first, second = asyncio.run(through_a_restart(tmp_path, restart_wait=60.0))
    assert statuses == [200, 200, 200, 200]
    late = [dict(r) for r in ledger.query("SELECT * FROM requests WHERE outcome = 'ok' ORDER BY started_at")]
    assert len(late) == 4
    for row in late:
        assert row["life_id"] == second, "served by the life that replaced the wedged one"
        assert json.loads(row["detail_json"])["waited_for_life"] > 0
    (wedged,) = [dict(r) for r in ledger.query("SELECT * FROM requests WHERE outcome != 'ok'")]
    assert wedged["life_id"] == first and wedged["outcome"] == "total_timeout"


def test_without_a_wait_the_same_requests_fail_at_once(tmp_path: Path) -> None:
    statuses, ledger, _, _ = asyncio.run(through_a_restart(tmp_path, restart_wait=0.0))
    assert statuses == [502, 502, 502, 502]
    outcomes = [r[0] for r in ledger.query("SELECT outcome FROM requests WHERE outcome != 'total_timeout'")]
    assert outcomes == ["connection"] * 4


def test_a_failed_start_stops_the_proxy_it_started(tmp_path: Path) -> None:
    (tmp_path / "exit.toml").write_text("[startup]\nexit_code = 3\n")
    cfg = server_config(tmp_path).model_copy(
        update={"scenario": str(tmp_path / "exit.toml"), "max_restarts": 0, "restart_backoff": 0.0}
    )
    stack = Stack(cfg, WatchdogConfig())

    async def main() -> None:
        with pytest.raises(Exception, match="exit"):
            await stack.start()
        assert stack.proxy._runner is None, "the proxy started first and was stopped again"

    asyncio.run(main())
