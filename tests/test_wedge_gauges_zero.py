"""The proxy's own knowledge counts: a server that wedges while its gauges read 0 running and 0
waiting (vLLM #46811: /health 200 for hours, num_requests_running 0 in a capture) is found by the
requests the proxy holds on it, at default settings, on the supervised stack and behind a
standalone ``proxy --metrics-url``. Real simulator subprocesses, real sockets, real SQLite.

Without the proxy's requests counted as work, neither the heartbeat rule (no work in the gauges)
nor the engine-time deadlines (the engine is still, so no engine time passes) would end the
request before ``total_timeout``'s 240 s: each test below would run into its 60 s bound.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from conftest import RunningServer
from wedgewatch.base.vocab import STALL_KINDS
from wedgewatch.config import ServerConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.stack.proxied import ProxiedServer
from wedgewatch.stack.servers import Stack
from wedgewatch.testing import eventually_async


async def _ask(session: aiohttp.ClientSession, url: str, text: str) -> tuple[int, dict[str, Any]]:
    body = {"model": "sim-model", "messages": [{"role": "user", "content": text}], "max_tokens": 40}
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        return resp.status, await resp.json()


async def test_a_wedge_the_gauges_deny_is_found_by_the_supervisor_at_defaults(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    # Every setting at its default but where logs go (and the resume, below): the scenario wedges on "WEDGE" with
    # running 0, waiting 0 and KV usage 0 on /metrics from then on.
    server = ServerConfig(profile="sim", scenario="wedge-gauges-zero", log_dir=str(tmp_path / "logs"))
    # on_wedge "fail": the scenario wedges every life the request reaches, and the subject here
    # is how soon the first wedge is found (a resume would only meet the second one).
    stack = Stack(server, WatchdogConfig(on_wedge="fail"), ledger=ledger)
    async with stack, aiohttp.ClientSession() as session:
        first = stack.supervisor.life_id
        async with asyncio.timeout(60):  # far below total_timeout's 240 s
            status, body = await _ask(session, stack.url, "WEDGE now")
        assert status == 503 and body["error"]["code"] in STALL_KINDS
        await eventually_async(
            lambda: stack.supervisor.life_id not in (None, first), timeout=60, what="a new life"
        )
        await stack.supervisor.wait_ready()
        status, _ = await _ask(session, stack.url, "and now?")
        assert status == 200  # the next life serves
    (wedge,) = [dict(r) for r in ledger.query("SELECT * FROM events WHERE kind = 'wedge'")]
    evidence = json.loads(wedge["detail_json"])
    assert wedge["life_id"] == first
    assert evidence["rule"] == "heartbeat" and evidence["window"] == 8.0
    assert (evidence["running"], evidence["waiting"]) == (0, 0)  # the gauges denied any work
    assert evidence["flat_seconds"] < 60
    (row,) = [dict(r) for r in ledger.query("SELECT * FROM requests WHERE life_id = ?", (first,))]
    # One answer asked for: ended by the heartbeat's verdict with nothing received (docs/proxy.md).
    assert row["outcome"] == "stall_ttft" and row["tokens_out"] == 0
    ledger.close()


async def test_a_wedge_the_gauges_deny_is_found_behind_a_standalone_proxy(
    start_sim: Callable[..., RunningServer], tmp_path: Path
) -> None:
    sim = start_sim("--scenario", "wedge-gauges-zero")
    server = ProxiedServer(
        sim.url, WatchdogConfig(), ledger_path=str(tmp_path / "l.sqlite"), metrics_url=sim.url + "/metrics"
    )
    url = await server.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            async with asyncio.timeout(60):
                status, body = await _ask(session, url, "WEDGE now")
            assert status == 503 and body["error"]["code"] in STALL_KINDS
            await eventually_async(lambda: server.proxy.in_flight() == 0, what="the request's end")
        assert server.ledger is not None
        (row,) = [dict(r) for r in server.ledger.query("SELECT * FROM requests")]
        assert row["outcome"] in STALL_KINDS
        detail = json.loads(row["detail_json"])
        assert detail["window"] == 8.0  # the heartbeat window's verdict, not a request deadline
    finally:
        await server.stop()
