"""The simulator speaking SGLang (``wedgewatch sim --dialect sglang``): SGLang's metric names on
``/metrics``, and its health endpoints with the frozen-scheduler signature.

Read once off a real SGLang (0.5.23, on a CPU, from a source build) whose scheduler was stopped
(SIGSTOP) mid-stream: ``/metrics`` still answers, every gauge frozen (``num_running_reqs`` stays
1); ``/health`` and ``/health_generate`` answer 503 after exactly 20 s (SGLang waits that long for
the scheduler to answer its health request); ``/v1/models`` answers 200; the stream goes silent.
The series are the ones that server exposed, among them the gauge ``sglang:num_retracted_reqs``
(requests retracted by the last batch; there is no ``sglang:num_retracted_requests_total``).

The engine underneath is the same as the vLLM dialect's: its counters are mapped onto SGLang's
names, and a wedge freezes them the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from wedgewatch.sim.engine import Engine
from wedgewatch.sim.metrics import Families

HEALTH_TIMEOUT = 20.0
"""Server seconds SGLang's /health and /health_generate wait for the scheduler before a 503
(divided by --time-scale, as every simulated duration)."""
LABELS = ["model_name"]


class SglangCollector(Collector):
    """The engine's counters under SGLang's names; frozen once the engine wedges."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        e = self.engine
        m = e.metrics_view()
        lv = [e.served_names[0]]
        families = Families(LABELS, lv)
        gauge, counter = families.gauge, families.counter
        yield gauge("sglang:num_running_reqs", "The number of running requests.", m.running)
        yield gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", m.waiting)
        capacity = e.scenario.server.kv_cache_tokens
        yield gauge("sglang:token_usage", "The token usage.", min(1.0, m.kv_tokens / capacity))
        yield gauge("sglang:num_used_tokens", "The number of used tokens.", m.kv_tokens)
        # A gauge of the last batch's retractions; the simulator's scheduler preempts whole
        # requests between steps and keeps no per-batch count, so it shows none.
        yield gauge("sglang:num_retracted_reqs", "The number of retracted requests.", 0)
        yield counter("sglang:prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens)
        yield counter(
            "sglang:generation_tokens", "Number of generation tokens processed.", m.generation_tokens
        )
        realtime = CounterMetricFamily(
            "sglang:realtime_tokens",
            "Total number of tokens processed (updated on each log interval).",
            labels=[*LABELS, "mode"],
        )
        realtime.add_metric([*lv, "prefill_compute"], m.prompt_tokens - m.prefix_hits)
        realtime.add_metric([*lv, "prefill_cache"], m.prefix_hits)
        realtime.add_metric([*lv, "decode"], m.generation_tokens)
        yield realtime


def make_registry(engine: Engine) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SglangCollector(engine))
    return reg


async def _health(engine: Engine) -> web.Response:
    """SGLang's rule: an idle scheduler serves the health request at once (200); a busy one is
    healthy when any output comes within the 20 s wait (200 then), else 503. So a frozen scheduler
    is 503 after 20 s, and so is a busy one whose long chunked prefill emits nothing for that long:
    the false unhealthy of SGLang #22511."""
    if not engine.ready():
        return web.json_response({}, status=503)
    if not engine.wedged and engine.m.running + engine.m.waiting == 0:
        return web.Response(status=200)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HEALTH_TIMEOUT / engine.scale
    seen = engine.m.generation_tokens  # the live counter: a frozen engine adds nothing to it
    while loop.time() < deadline:
        if engine.m.generation_tokens > seen:
            return web.Response(status=200)
        await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))
    return web.Response(status=503)


def routes(engine: Engine) -> list[web.RouteDef]:
    """SGLang's ``/health`` and ``/health_generate`` (both wait on the scheduler)."""

    async def health(request: web.Request) -> web.Response:
        return await _health(engine)

    return [web.get("/health", health), web.get("/health_generate", health)]
