"""One server life: its process, its age, its detector, and the scrape that feeds the detector."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from wedgewatch.base.protocols import LifeInfo, ProxyView, ServerProcess, no_proxy
from wedgewatch.config import ServerConfig
from wedgewatch.supervisor import probes
from wedgewatch.supervisor.detector import WedgeDetector, reduce
from wedgewatch.supervisor.profiles import Series
from wedgewatch.supervisor.recorder import Recorder
from wedgewatch.wire.heartbeat import Reading

log = logging.getLogger(__name__)


def api_key(argv: list[str]) -> str | None:
    """The server's own ``--api-key`` (vLLM, llama-server), which our probes must present."""
    for i, arg in enumerate(argv):
        if arg == "--api-key" and i + 1 < len(argv):
            return argv[i + 1].split(",")[0]
        if arg.startswith("--api-key="):
            return arg.split("=", 1)[1].split(",")[0]
    return None


KEY_ENV = "VLLM_API_KEY"
"""Where vLLM (and the simulator, as vLLM does) also reads its key when no --api-key is given."""


def server_key(cfg: ServerConfig) -> str | None:
    """The key a server we start wants, as it will read it: its ``--api-key``, else (vllm and sim)
    ``VLLM_API_KEY`` from its ``env`` or from ours, which it inherits. Our probes present it, and
    the proxy sends it upstream in place of its own incoming key (wire/access.py)."""
    key = api_key(cfg.args)
    if key is None and cfg.profile in ("vllm", "sim"):
        key = cfg.env.get(KEY_ENV) or os.environ.get(KEY_ENV) or None
    return key


def new_life_id() -> str:
    return "life-" + uuid.uuid4().hex[:12]


@dataclass(eq=False)
class Life:
    life_id: str
    proc: ServerProcess
    argv: list[str]
    start_reason: str
    started: float  # supervisor clock
    detector: WedgeDetector
    log_path: Path | None = None
    owned: bool = True  # False: adopted or external, we did not start it
    concurrency: int | None = None
    ready: bool = False
    ended: bool = False
    wedged: bool = False
    crashed: bool = False
    recycling: bool = False
    restart_due: bool = False  # a restart was decided: hand the life out no more
    draining: bool = False  # a planned recycle waits for attempts in flight: hand out no new ones
    ready_at: float | None = None  # supervisor clock, once ready and warmed
    cores: str | None = None  # the CPUs its engine is bound to beside a spare (standby.py)
    asleep: bool = False  # a spare put to sleep (vLLM sleep mode) until promoted
    generated: float | None = None  # the server's generated-tokens counter, last scrape
    reading: Reading | None = None
    last_scrape_ok: float = 0.0
    own_requests: int = 0  # warm-ups and canaries
    proxy_requests: int = 0
    proxy_tokens: int = 0
    watch_task: asyncio.Task[None] | None = None
    probe_task: asyncio.Task[None] | None = None
    warmup: list[dict[str, Any]] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return self.proc.base_url

    def age_tokens(self) -> int:
        # The server's own counter when it has one: it sees every request, ours and others'.
        if self.generated is not None:
            return int(self.generated)
        return self.proxy_tokens

    def info(self, now: float) -> LifeInfo:
        return LifeInfo(
            self.life_id, now - self.started, self.own_requests + self.proxy_requests, self.age_tokens()
        )

    def load(self) -> dict[str, Any]:
        """The last reading's load, for a canary's record."""
        r = self.reading
        return {
            "limit": self.concurrency,
            "running": r.running if r else None,
            "waiting": r.waiting if r else None,
        }

    def at_limit(self) -> bool:
        """Whether the server is full, so a canary would only wait in its queue. A full server
        on which nothing moved since the last scrape is not busy but stuck: no skip then."""
        r = self.reading
        if r is None or not self.detector.moving:
            return False
        if r.waiting is not None and r.waiting > 0:
            return True
        return self.concurrency is not None and r.running is not None and r.running >= self.concurrency

    async def scrape(
        self,
        session: aiohttp.ClientSession,
        series: Series,
        rec: Recorder,
        clock: Callable[[], float],
        headers: dict[str, str] | None,
        timeout: float = 2.0,
        view: ProxyView = no_proxy,
    ) -> tuple[bool, dict[str, Any] | None, str]:
        """One scrape of this life's ``/metrics``: record the watched series, update the age, feed
        the detector (with what the proxy, ``view``, holds on this life and relayed from it).
        Returns (scraped, wedge evidence or None, error)."""
        samples, err = await probes.scrape(session, self.base_url, timeout, headers)
        if samples is None:
            return False, None, err
        now = clock()
        self.last_scrape_ok = now
        held, relayed = view(self.life_id)
        r = dataclasses.replace(reduce(samples, series, now, time.time()), held=held, relayed=relayed)
        self.reading = r
        if r.generated is not None:
            self.generated = r.generated
        rec.samples(self.life_id, r, {n: samples.total(n) for n in series.names()})
        return True, self.detector.observe(r), ""
