"""What every request handler of one proxy shares."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import aiohttp

from wedgewatch.base.clock import Clock
from wedgewatch.base.events import EventBus
from wedgewatch.base.processes import Identity
from wedgewatch.base.protocols import Upstream
from wedgewatch.config import WatchdogConfig
from wedgewatch.proxy.metrics import ProxyMetrics
from wedgewatch.proxy.records import RecordSink


@dataclass
class Shared:
    """The session, upstream, settings, clock, bus, record sink and metrics of one proxy, handed
    to each request it handles."""

    session: aiohttp.ClientSession
    upstream: Upstream
    cfg: WatchdogConfig
    clock: Clock  # readings and the request deadlines' timers
    bus: EventBus
    sink: RecordSink
    metrics: ProxyMetrics
    # Tokens relayed per server life by requests that have ended (``Proxy.held_on`` adds those in
    # flight): movement the supervisor counts even when the server's own counters lag.
    relayed: dict[str, int] = field(default_factory=dict)
    # This process, as its rows name it (a request's start row: who holds the request).
    me: Identity = field(default_factory=Identity.me)
    engine: bool = False  # deadlines count engine time (a heartbeat reaches us; proxy/deadlines.py)
    # Request ids: 64 random bits from a generator of our own, seeded from the OS once (not one
    # urandom call per request), and immune to anyone seeding the global ``random``.
    ids: random.Random = field(default_factory=random.Random)
