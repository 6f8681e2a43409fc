"""The heartbeat rules end to end: the simulator as a supervised subprocess, the supervisor and
the proxy in this process, real sockets and SQLite. Every window is its default divided by the
simulator's time scale, so "seconds" below are the server's seconds."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from wedgewatch.base.events import Event, EventBus, Wedged
from wedgewatch.config import ServerConfig, WarmupConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.supervisor import Supervisor
from wedgewatch.wire import promtext
from wedgewatch.wire.heartbeat import Reading

SLACK = 1.0  # wall seconds of scheduling noise allowed on a loaded 2-core machine


def scaled(scale: float, **over: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Default windows in the server's seconds, as wall seconds at ``scale``. None of them selects
    the old rules (wedge_window, ttft_timeout, stall_timeout are left unset)."""
    s, w = ServerConfig(), WatchdogConfig()
    server = {
        "heartbeat_window": s.heartbeat_window / scale,
        "scrape_interval": s.scrape_interval / scale,
        "canary_timeout": s.canary_timeout / scale,
    }
    watchdog = {
        "engine_ttft_timeout": w.engine_ttft_timeout / scale,
        "engine_stall_timeout": w.engine_stall_timeout / scale,
        "total_timeout": w.total_timeout / scale,
        "rate_window": w.rate_window / scale,
        "min_rate": w.min_rate * scale,
    }
    for k, v in over.items():
        (watchdog if k in WatchdogConfig.model_fields else server)[k] = v
    return server, watchdog


@dataclass
class Stack:
    sup: Supervisor
    proxy: Proxy
    url: str
    events: list[tuple[float, Event]] = field(default_factory=list)
    readings: list[tuple[float, Reading]] = field(default_factory=list)

    def kinds(self) -> list[str]:
        return [e.kind for _, e in self.events]

    async def metrics(self) -> promtext.Samples:
        async with aiohttp.ClientSession() as s, s.get(self.sup.base_url + "/metrics") as resp:
            return promtext.parse(await resp.text())


@pytest.fixture
async def stack_factory(tmp_path: Path) -> AsyncIterator[Any]:
    made: list[Stack] = []
    ledger = Ledger(tmp_path / "l.sqlite")

    async def make(scenario: str, scale: float, args: list[str] | None = None, **over: Any) -> Stack:
        server, watchdog = scaled(scale, **over)
        cfg = ServerConfig(
            profile="sim",
            scenario=scenario,
            time_scale=scale,
            args=args or [],
            log_dir=str(tmp_path / "logs"),
            startup_timeout=30.0,
            stop_grace=2.0,
            restart_backoff=0.1,
            warmup=WarmupConfig(count=1, timeout=10.0),
            **server,
        )
        sup_bus, proxy_bus = EventBus(), EventBus()
        sup = Supervisor(cfg, ledger=ledger, bus=sup_bus, run_id="run-d")
        await sup.start()
        proxy = Proxy(sup, WatchdogConfig(**watchdog), bus=proxy_bus, feed=sup.feed)
        sup.attach(proxy_bus)
        st = Stack(sup, proxy, await proxy.start())
        for bus in (sup_bus, proxy_bus):
            bus.subscribe(lambda ev: st.events.append((time.monotonic(), ev)))
        sup.feed.subscribe(lambda rd, _life: st.readings.append((time.monotonic(), rd)), lambda *_: None)
        made.append(st)
        return st

    yield make
    for st in made:
        await st.proxy.stop()
        await st.sup.stop()
    ledger.close()


@dataclass
class Reply:
    status: int = 0
    token_times: list[float] = field(default_factory=list)
    error: str = ""
    ended: float = 0.0


async def chat(url: str, text: str, max_tokens: int = 20, timeout: float = 120.0) -> Reply:
    out = Reply()
    body = {"model": "sim-model", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}
    body["stream"] = True
    async with (
        aiohttp.ClientSession() as s,
        s.post(url + "/v1/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=timeout)) as resp,
    ):
        out.status = resp.status
        async for line in resp.content:
            if b'"error"' in line or resp.status != 200:
                out.error += line.decode()
            elif line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
                out.token_times.append(time.monotonic())
    out.ended = time.monotonic()
    return out


def prompt(tokens: int, word: str = "") -> str:
    return word + " " + "x " * tokens  # one token per " x" (sim/tokenizer.py)


async def test_a_60_s_prefill_ends_normally_no_stall_no_canary_no_restart(stack_factory: Any) -> None:
    st = await stack_factory("long-prefill", 10.0, args=["--max-model-len", "131072"])
    t0 = time.monotonic()
    reply = await chat(st.url, prompt(60_000))
    assert reply.status == 200 and len(reply.token_times) == 20
    assert reply.token_times[0] - t0 >= 5.5  # 60 s of the server's prefill, at 10x
    assert not {"stall", "wedge", "restart", "upstream_error"} & set(st.kinds())
    rows = st.sup.rec.ledger.query("SELECT kind FROM events WHERE kind IN ('canary', 'wedge')", ())  # type: ignore[union-attr]
    assert rows == []
    # The hard case really happened: prompt and generated tokens flat far past the heartbeat
    # window, while the heartbeat moved.
    during = [rd for t, rd in st.readings if t0 + 0.5 < t < reply.token_times[0] - 0.2]
    assert len({rd.tokens for rd in during}) == 1 and len({rd.beat for rd in during}) > 10
    assert during[-1].at - during[0].at > 5 * st.sup.cfg.heartbeat_window


async def test_queued_for_five_first_token_deadlines_is_not_a_stall(stack_factory: Any) -> None:
    # One slot; the first request holds it for 5.5 engine_ttft_timeouts of the second's queueing.
    # The subject is the first-token deadline; the mid-stream one (10 s / 20 = 0.5 s of wall time)
    # is raised out of a loaded machine's scheduling noise, which the holder's stream met once.
    st = await stack_factory(
        "queue-at-cap", 20.0, args=["--max-num-seqs", "1"], engine_ttft_timeout=0.6, engine_stall_timeout=2.0
    )
    holder = asyncio.ensure_future(chat(st.url, "hold the slot", max_tokens=1320))  # 66 s at 20 tokens/s
    await asyncio.sleep(0.3)
    queued = await chat(st.url, "then me")
    first = await holder
    assert first.status == 200 and len(first.token_times) == 1320
    assert queued.status == 200 and len(queued.token_times) == 20
    waited = queued.token_times[0] - first.token_times[0]
    assert waited >= 5 * 0.6  # queued behind the holder for more than five deadlines
    assert "stall" not in st.kinds()
    assert max(rd.waiting or 0 for _, rd in st.readings) == 1  # the queue was visible


async def test_a_preempted_request_that_resumes_is_not_a_stall(stack_factory: Any) -> None:
    st = await stack_factory("preemption", 10.0)
    # A long prompt first, a short one admitted after it: as both decode, the cache overflows and
    # the later admitted one is sent back mid-stream until the first one ends.
    a = asyncio.ensure_future(chat(st.url, prompt(11_800, "first"), max_tokens=400))
    await asyncio.sleep(0.1)
    b = asyncio.ensure_future(chat(st.url, "second", max_tokens=400))
    ra, rb = await a, await b
    assert ra.status == 200 and rb.status == 200
    assert len(ra.token_times) == 400 and len(rb.token_times) == 400
    preempted = (await st.metrics()).total("vllm:num_preemptions_total")
    assert preempted is not None and preempted >= 1
    assert "stall" not in st.kinds() and "wedge" not in st.kinds()
    gap = max(y - x for x, y in zip(rb.token_times, rb.token_times[1:], strict=False))
    assert gap > 1.5 * WatchdogConfig().engine_stall_timeout / 10  # silent past the stall deadline


def last_beat_before(st: Stack, t: float) -> float:
    """When the heartbeat or the tokens last moved, as seen by the supervisor's scrapes."""
    rs = [(at, rd) for at, rd in st.readings if at <= t]
    last = rs[0][0]
    for (_, prev), (at, rd) in itertools.pairwise(rs):
        if rd.moved_since(prev):
            last = at
    return last


async def test_a_wedge_during_a_prefill_is_found_within_15_server_seconds(stack_factory: Any) -> None:
    scale = 5.0
    st = await stack_factory("wedge-in-prefill", scale, args=["--max-model-len", "131072"])
    reply = await chat(st.url, prompt(30_000, "WEDGE-PREFILL"))
    t_wedge, ev = next((t, e) for t, e in st.events if isinstance(e, Wedged))
    assert ev.evidence["rule"] == "heartbeat" and ev.evidence["source"] == "metrics"
    assert reply.status == 503 and reply.token_times == [] and "engine stopped" in reply.error
    last = last_beat_before(st, t_wedge)
    assert (t_wedge - last) * scale <= 15.0 + SLACK * scale
    assert (reply.ended - last) * scale <= 15.0 + SLACK * scale


async def test_a_mid_stream_wedge_is_found_within_15_server_seconds(stack_factory: Any) -> None:
    scale = 5.0
    st = await stack_factory("wedge-all", scale)
    reply = await chat(st.url, "WEDGE now", max_tokens=100)
    t_wedge, ev = next((t, e) for t, e in st.events if isinstance(e, Wedged))
    assert ev.evidence["rule"] == "heartbeat"
    assert len(reply.token_times) == 3 and "engine stopped" in reply.error
    assert (t_wedge - reply.token_times[-1]) * scale <= 15.0 + SLACK * scale
    assert (reply.ended - reply.token_times[-1]) * scale <= 15.0 + SLACK * scale
    assert "restart" in st.kinds()


async def test_one_request_hung_while_the_engine_steps_is_aborted_and_no_restart(stack_factory: Any) -> None:
    scale = 5.0
    st = await stack_factory("stuck-one", scale)
    other = asyncio.ensure_future(chat(st.url, "keep the engine busy", max_tokens=1000))  # 20 s
    await asyncio.sleep(0.2)
    stuck = await chat(st.url, "STUCK here", max_tokens=200)
    assert len(stuck.token_times) == 5 and "engine_stall_timeout" in stuck.error
    since = stuck.ended - stuck.token_times[-1]
    assert since * scale <= WatchdogConfig().engine_stall_timeout + 2 + SLACK * scale  # + two scrapes
    assert since * scale >= WatchdogConfig().engine_stall_timeout - 1
    healthy = await other
    assert healthy.status == 200 and len(healthy.token_times) == 1000
    await asyncio.sleep(0.5)
    assert "wedge" not in st.kinds() and "restart" not in st.kinds()
    canaries = st.sup.rec.ledger.query("SELECT detail_json FROM events WHERE kind = 'canary'", ())  # type: ignore[union-attr]
    assert canaries and all(json.loads(row[0])["ok"] is True for row in canaries), [r[0] for r in canaries]
