"""The stochastic wedge: a per-request hazard that depends on the server's state.

Each accepted generation request, when it starts running, draws from the scenario's hazard

    h = base x cold x age(requests) x running^k x prefix_caching x cuda_graphs x lora  (+ adapter wear-out)

and, with probability ``1 - exp(-h)``, wedges the whole server after a number of its own tokens
drawn uniformly from its reply. Draws come from one ``random.Random(seed)`` in admission order, so a
run is reproducible given the seed and the sequence of requests.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from wedgewatch.sim.scenario import Wedge


@dataclass(slots=True, frozen=True)
class ServerState:
    """What the hazard sees when a request starts running."""

    age_requests: int  # requests admitted before this one, preloaded age included
    running: int  # running requests, this one included
    prefix_caching: bool
    eager: bool
    adapter_requests: int | None  # the adapter's requests before this one; None for the base model


def hazard(w: Wedge, s: ServerState) -> float:
    """Cumulative hazard this request adds (a probability via 1 - exp(-h))."""
    h = w.base_hazard
    if s.age_requests < w.cold_requests:
        h *= w.cold_multiplier
    ramp = 1.0 / (1.0 + math.exp(-(s.age_requests - w.age_midpoint_requests) / w.age_width_requests))
    h *= 1.0 + (w.age_multiplier - 1.0) * ramp
    h *= math.pow(max(s.running, 1), w.concurrency_exponent)
    if s.prefix_caching:
        h *= w.prefix_caching_multiplier
    if not s.eager:
        h *= w.cuda_graphs_multiplier
    if s.adapter_requests is not None:
        h *= w.lora_multiplier
        if w.lora_scale_requests > 0:
            n, lam, k = s.adapter_requests, w.lora_scale_requests, w.lora_shape
            h += math.pow((n + 1) / lam, k) - math.pow(n / lam, k)
    return h


def probability(w: Wedge, s: ServerState) -> float:
    return 1.0 - math.exp(-hazard(w, s))


class WedgeDice:
    """Seeded draws: for each request, whether it wedges the server and after how many tokens."""

    def __init__(self, w: Wedge, seed: int) -> None:
        self.w = w
        self.rng = random.Random(seed)

    def roll(self, s: ServerState, reply_tokens: int) -> int | None:
        """Tokens after which this request wedges the server, or None."""
        u, v = self.rng.random(), self.rng.random()
        if u < probability(self.w, s):
            return int(v * max(reply_tokens, 1))
        return None


@dataclass(slots=True, frozen=True)
class Workload:
    """A steady workload, for stating a scenario's ground truth as a wedge probability."""

    requests: int
    concurrency: int = 1
    preload_age: int = 0
    warmup: int = 0  # warm-up requests sent one at a time first (not counted in ``requests``)
    prefix_caching: bool = True
    eager: bool = False
    adapter: bool = False


def wedge_probability(w: Wedge, load: Workload) -> float:
    """Probability that the server wedges during ``load`` (warm-up included)."""
    total, age = 0.0, load.preload_age
    for _ in range(load.warmup):
        total += hazard(w, ServerState(age, 1, load.prefix_caching, load.eager, None))
        age += 1
    for i in range(load.requests):
        state = ServerState(
            age, load.concurrency, load.prefix_caching, load.eager, i if load.adapter else None
        )
        total += hazard(w, state)
        age += 1
    return 1.0 - math.exp(-total)
