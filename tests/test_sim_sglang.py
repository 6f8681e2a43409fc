"""The simulator's SGLang dialect: every series the ``sglang`` profile reads is on its /metrics
(the preemption series is SGLang's gauge ``sglang:num_retracted_reqs``), and a wedged engine shows
the frozen scheduler a real SGLang showed: gauges frozen, /health and /health_generate 503 after
SGLang's 20 s wait, /v1/models 200, the stream silent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

from conftest import RunningServer
from wedgewatch.config import ServerConfig
from wedgewatch.sim.sglang import HEALTH_TIMEOUT
from wedgewatch.supervisor import profiles
from wedgewatch.testing import eventually_async
from wedgewatch.wire import promtext

SCALE = 10.0  # SGLang's 20 s health wait is 2 s here


async def metrics(s: aiohttp.ClientSession, url: str) -> promtext.Samples:
    async with s.get(url + "/metrics") as resp:
        assert resp.status == 200
        return promtext.parse(await resp.text())


async def test_every_series_the_sglang_profile_reads_is_served(
    start_sim: Callable[..., RunningServer],
) -> None:
    sim = start_sim("--dialect", "sglang", "--scenario", "healthy", "--time-scale", str(SCALE))
    profile = profiles.get_profile("sglang")
    names = profiles.series(ServerConfig(profile="sglang", model="m"), profile).names()
    assert "sglang:num_retracted_reqs" in names
    async with aiohttp.ClientSession() as s:
        samples = await metrics(s, sim.url)
        for path in ("/health", "/health_generate"):
            async with s.get(sim.url + path) as resp:
                assert resp.status == 200, path
    assert [n for n in names if samples.total(n) is None] == []
    assert samples.total("vllm:num_requests_running") is None  # SGLang's names only


async def test_a_wedged_engine_shows_sglangs_frozen_scheduler(
    start_sim: Callable[..., RunningServer],
) -> None:
    sim = start_sim("--dialect", "sglang", "--scenario", "keywords", "--time-scale", str(SCALE))
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "WEDGE now"}],
        "max_tokens": 50,
        "stream": True,
    }
    async with aiohttp.ClientSession() as s, s.post(sim.url + "/v1/chat/completions", json=body) as stream:
        assert stream.status == 200

        async def wedged() -> bool:
            async with s.get(sim.url + "/sim/stats") as resp:
                return bool((await resp.json())["wedged"])

        await eventually_async(wedged, what="the engine wedged by the WEDGE keyword")
        frozen = await metrics(s, sim.url)
        assert frozen.total("sglang:num_running_reqs") == 1
        before = await asyncio.wait_for(stream.content.read(1 << 16), 1.0)
        assert b"data:" in before  # the tokens before the wedge
        # The stream goes silent: nothing more arrives while we look.
        try:
            more = await asyncio.wait_for(stream.content.read(1), 1.0)
        except TimeoutError:
            more = b""
        assert more == b""
        later = await metrics(s, sim.url)
        for name in ("sglang:num_running_reqs", "sglang:token_usage", "sglang:generation_tokens_total"):
            assert later.total(name) == frozen.total(name), name
        for path in ("/health", "/health_generate"):
            t0 = time.monotonic()
            async with s.get(sim.url + path) as resp:
                assert resp.status == 503, path
            assert time.monotonic() - t0 >= HEALTH_TIMEOUT / SCALE - 0.05, (
                f"{path} answered before SGLang's wait"
            )
        async with s.get(sim.url + "/v1/models") as resp:
            assert resp.status == 200
