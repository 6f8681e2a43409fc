"""The simulated engine's state: slots and queue, counters, the wedge, and the prefix cache.

The hot path touches plain ints here; /metrics reads them at scrape time (see ``metrics.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from wedgewatch.sim import death
from wedgewatch.sim.faults import FaultBook
from wedgewatch.sim.policy import Policy
from wedgewatch.sim.scenario import Scenario
from wedgewatch.sim.sched import Scheduler
from wedgewatch.sim.wedge import ServerState, WedgeDice

log = logging.getLogger(__name__)

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
ITER_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PREFIX_BLOCK = 16  # prefix-cache hits are counted in whole blocks, as vLLM's are


@dataclass
class SimOptions:
    """Everything the command line sets."""

    host: str = "127.0.0.1"
    port: int = 8000
    scenario: str = "healthy"
    time_scale: float = 1.0
    max_num_seqs: int | None = None
    model: str = "sim-model"
    served_model_names: list[str] = field(default_factory=list)
    prefix_caching: bool = True
    enforce_eager: bool = False
    enable_lora: bool = False
    lora_modules: dict[str, str] = field(default_factory=dict)
    sse_ping_interval: float | None = None
    seed: int = 0
    policy: str = "filler"
    max_model_len: int = 32768
    preload_age: int = 0
    fault_log: str | None = None  # JSONL: one line per request a fault or the wedge struck
    dialect: str = "vllm"  # whose metric names and health endpoints: vllm, or sglang (sim/sglang.py)
    api_key: str | None = None  # vLLM's --api-key: every route but /health wants it (wire/access.py)
    sleep_mode: bool = False  # vLLM's --enable-sleep-mode: /sleep and /wake_up in dev mode (sim/sleep.py)


class Histogram:
    """Bucket counts kept by hand: one bisect per observation, no locks."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, v: float, n: int = 1) -> None:
        self.counts[bisect_left(self.bounds, v)] += n
        self.sum += v * n

    def copy(self) -> Histogram:
        h = Histogram(self.bounds)
        h.counts, h.sum = list(self.counts), self.sum
        return h


@dataclass
class Counters:
    """Everything /metrics exposes, copied whole when the server wedges."""

    running: int = 0
    waiting: int = 0
    kv_tokens: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    preemptions: int = 0
    steps: int = 0
    success: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    iteration: Histogram = field(default_factory=lambda: Histogram(ITER_BUCKETS))

    def snapshot(self) -> Counters:
        return Counters(
            self.running,
            self.waiting,
            self.kv_tokens,
            self.prompt_tokens,
            self.generation_tokens,
            self.prefix_queries,
            self.prefix_hits,
            self.preemptions,
            self.steps,
            dict(self.success),
            self.ttft.copy(),
            self.itl.copy(),
            self.iteration.copy(),
        )


@dataclass
class Stats:
    """The simulator's own truth, for /sim/stats (not frozen by a wedge)."""

    received: int = 0
    in_flight: int = 0
    completed: int = 0
    aborted: int = 0
    dropped: int = 0
    http_errors: int = 0
    rejected: int = 0
    by_path: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    tokens_generated: int = 0
    broken: int = 0  # answered with a broken reply (sim/broken.py): HTML, not JSON, cut, endless
    sleeps: int = 0
    wakes: int = 0
    by_model: dict[str, int] = field(default_factory=dict)  # requests by the served name asked for
    by_shape: dict[str, int] = field(default_factory=dict)  # logprobs, response_format, tools asked


class Engine:
    def __init__(self, opts: SimOptions, scenario: Scenario, policy: Policy) -> None:
        self.opts = opts
        self.scenario = scenario
        self.policy = policy
        self.served_names = opts.served_model_names or [opts.model]
        self.max_num_seqs = opts.max_num_seqs or scenario.server.max_num_seqs or 256
        self.scale = opts.time_scale
        self.token_rate = scenario.server.tokens_per_s * self.scale
        self.prefill_rate = scenario.server.prefill_tokens_per_s * self.scale
        self.ping = opts.sse_ping_interval / self.scale if opts.sse_ping_interval else None
        self.m = Counters()
        self.frozen: Counters | None = None  # what /metrics shows once wedged
        self.stats = Stats()
        self.faults = FaultBook(scenario.fault)
        self.dice = WedgeDice(scenario.wedge, opts.seed) if scenario.wedge else None
        self.age_requests = opts.preload_age
        self.adapter_requests: dict[str, int] = {}
        self.wedged_at: float | None = None
        self.wedge_cause = ""
        self.livelocked_at: float | None = None
        self.dead_at: float | None = None  # the engine died (sim/death.py): every request fails
        self.live: set[asyncio.Future[Any]] = set()  # each generation in flight: a death ends them
        self.ready_at = 0.0
        self.listener: asyncio.Server | None = None  # closed first by a lingering crash
        self.started = time.time()
        self.chunk_tokens = scenario.server.max_num_batched_tokens
        self.sched = Scheduler(
            self.m, self.max_num_seqs, scenario.server.kv_cache_tokens, self.token_rate, time.monotonic
        )
        self._prefixes: set[int] = set()
        self.asleep = False  # sim/sleep.py

    # --- readiness and the wedge -----------------------------------------------------------------

    def ready(self) -> bool:
        return self.dead_at is None and asyncio.get_running_loop().time() >= self.ready_at

    def die(self, exit_code: int, delay: float) -> None:
        """The engine dies (sim/death.py): its counters stop, every generation in flight ends, and
        the process exits ``delay`` seconds later."""
        if self.dead_at is not None:
            return
        self.sched.flush()
        self.frozen = self.m.snapshot()
        self.dead_at = time.time()
        for task in list(self.live):
            task.cancel()
        death.exit_later(asyncio.get_running_loop(), exit_code, delay)

    @property
    def wedged(self) -> bool:
        return self.wedged_at is not None

    def wedge(self, cause: str, gauges: str = "frozen") -> None:
        if self.wedged_at is None:
            self.sched.flush()
            self.frozen = self.m.snapshot()
            if gauges == "zero":  # the gauges deny the work the engine holds (vLLM #46811)
                self.frozen.running = self.frozen.waiting = self.frozen.kv_tokens = 0
            self.wedged_at = time.time()
            self.wedge_cause = cause
            log.warning("engine wedged (%s) at age %d requests", cause, self.age_requests)

    @property
    def livelocked(self) -> bool:
        return self.livelocked_at is not None

    def livelock(self) -> None:
        """The engine goes on stepping (steps, KV usage and admissions move on /metrics) but no
        request gets another token: mlx-lm #1493's batch loop, iterating with nothing delivered."""
        if self.livelocked_at is None:
            self.livelocked_at = time.time()
            log.warning("engine livelocked at age %d requests", self.age_requests)

    def record_fault(self, action: str, messages: list[dict[str, Any]], tokens: int) -> None:
        """The simulator's own record of each request it struck (``--fault-log``): the ground
        truth a test holds wedgewatch's attribution against. It holds the prompts' text: it is a
        test server's log, not wedgewatch's ledger, which never stores text."""
        if self.opts.fault_log is None:
            return
        users = [m.get("content") for m in messages if m.get("role") == "user"]
        texts = [u if isinstance(u, str) else json.dumps(u) for u in users]
        line = {
            "ts": time.time(),
            "pid": os.getpid(),
            "action": action,
            "tokens": tokens,
            "first_user": texts[0][:8000] if texts else "",
            "last_user": texts[-1][:2000] if texts else "",
        }
        with open(self.opts.fault_log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")

    def metrics_view(self) -> Counters:
        if self.frozen is not None:
            return self.frozen
        self.sched.flush()
        return self.m

    # --- admission: age, hazard, prefix cache -----------------------------------------------------

    def admit(self, adapter: str | None, reply_tokens: int) -> int | None:
        """Count the request into the server's age; return the token count at which it wedges
        the server (stochastic wedge), or None."""
        wedge_at = None
        if self.dice is not None:
            state = ServerState(
                age_requests=self.age_requests,
                running=self.m.running,
                prefix_caching=self.opts.prefix_caching,
                eager=self.opts.enforce_eager,
                adapter_requests=self.adapter_requests.get(adapter, 0) if adapter else None,
            )
            wedge_at = self.dice.roll(state, reply_tokens)
        self.age_requests += 1
        if adapter:
            self.adapter_requests[adapter] = self.adapter_requests.get(adapter, 0) + 1
        return wedge_at

    def cached_tokens(self, prefix_keys: list[tuple[int, int]], prompt_tokens: int) -> int:
        """Prompt tokens served from the prefix cache: the longest earlier-seen message prefix,
        in whole blocks, never the whole prompt (the last token is always computed)."""
        if not self.opts.prefix_caching:
            return 0
        hit = 0
        for key, tokens in prefix_keys:
            if key in self._prefixes:
                hit = tokens
        return min(hit, prompt_tokens - 1) // PREFIX_BLOCK * PREFIX_BLOCK

    def remember_prefixes(self, prefix_keys: list[tuple[int, int]]) -> None:
        if not self.opts.prefix_caching:
            return
        if len(self._prefixes) > 100_000:
            self._prefixes.clear()  # a crude eviction: a full cache starts over
        self._prefixes.update(key for key, _ in prefix_keys)

    def info(self) -> dict[str, Any]:
        s = self.stats
        return {
            "received": s.received,
            "in_flight": s.in_flight,
            "completed": s.completed,
            "aborted": s.aborted,
            "dropped": s.dropped,
            "http_errors": s.http_errors,
            "rejected": s.rejected,
            "by_path": dict(s.by_path),
            "faults": dict(s.faults),
            "wedged": self.wedged,
            "wedge_cause": self.wedge_cause or None,
            "livelocked": self.livelocked,
            "broken": s.broken,
            "sleeps": s.sleeps,
            "wakes": s.wakes,
            "asleep": self.asleep,
            "by_model": dict(s.by_model),
            "by_shape": dict(s.by_shape),
            "requests_served": s.completed,
            "tokens_generated": s.tokens_generated,
            "age_requests": self.age_requests,
            "preload_age": self.opts.preload_age,
            "running": self.m.running,
            "waiting": self.m.waiting,
            "scenario": self.scenario.name,
            "seed": self.opts.seed,
            "uptime_s": time.time() - self.started,
        }
