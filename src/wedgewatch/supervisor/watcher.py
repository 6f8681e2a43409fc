"""How one server life is watched, and nothing more: a scrape every ``scrape_interval`` (the
readings through ``Life.scrape``, the verdict from ``watch.WedgeDetector``) and a one-token canary
when the proxy reports a stall or ``/metrics`` stops answering. The watcher reports what it sees (a
crash, a wedge, a planned recycle) to its supervisor, which alone decides what to do about it, so a
stale alarm about an ended life can never kill its successor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from wedgewatch.base.clock import Clock
from wedgewatch.base.events import (
    CanaryAnswered,
    CanarySkipped,
    Event,
    EventBus,
    LifeInDoubt,
    RequestEnded,
    RequestOk,
    Stalled,
    UpstreamFailed,
)
from wedgewatch.base.protocols import ProxyView, no_proxy
from wedgewatch.config import ServerConfig
from wedgewatch.supervisor.life import Life
from wedgewatch.supervisor.policy import RestartPolicy
from wedgewatch.supervisor.profiles import Series
from wedgewatch.supervisor.recorder import Recorder
from wedgewatch.supervisor.start import Starter
from wedgewatch.wire.heartbeat import Feed

# Polls, 50 ms apart, for a process whose canary failed to show up as dead before it is a wedge.
DEATH_GRACE_POLLS = 10
# How long past its canary's timeout a probe may take before whoever waits for its verdict stops
# waiting: the death-grace polls, plus room for a loaded machine, where a 1.0 s canary timeout
# was seen to fire 0.7 s late. Too short, and an attempt failed by a wedge was charged to its
# instance because the verdict came a moment after the runner stopped waiting.
PROBE_SLACK = DEATH_GRACE_POLLS * 0.05 + 10.0


@dataclass(frozen=True)
class Reports:
    """Where a watcher's findings go (the supervisor's handlers)."""

    crash: Callable[[Life, int], None]
    wedge: Callable[[Life, dict[str, Any]], Coroutine[Any, Any, None]]
    recycle: Callable[[str, Life], Coroutine[Any, Any, None]]
    spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]


@dataclass
class Watcher:
    cfg: ServerConfig
    starter: Starter
    series: Series
    rec: Recorder  # the metric samples of each scrape
    bus: EventBus  # the canaries
    clock: Clock
    headers: dict[str, str] | None
    feed: Feed
    policy: RestartPolicy
    reports: Reports
    view: ProxyView = no_proxy  # what the proxy in front holds on each life (the Stack sets it)

    async def watch(self, life: Life) -> None:
        """Scrape every ``scrape_interval``; a crash, a wedge or a recycle asks for a restart."""
        session = self.starter.session
        assert session is not None
        interval = self.cfg.scrape_interval
        life.last_scrape_ok = self.clock()
        nxt = self.clock()
        while not life.ended:
            code = life.proc.poll()
            if code is not None:
                self.reports.crash(life, code)
                return
            ok, evidence, err = await life.scrape(
                session, self.series, self.rec, self.clock, self.headers, view=self.view
            )
            now = self.clock()
            if ok and life.reading is not None:
                self.feed.reading(life.reading, life.life_id)
            elif not ok and evidence is None:
                evidence = life.detector.unreachable(now)
            if evidence is not None:
                self.reports.spawn(self.reports.wedge(life, evidence))
                return
            if ok:
                recycle = self.policy.tokens(life.age_tokens())
                if recycle and not life.recycling:
                    life.recycling = True
                    self.reports.spawn(self.reports.recycle(recycle, life))
            elif now - life.last_scrape_ok >= self.starter.window and life.probe_task is None:
                # /metrics itself has not answered for a whole window: let a canary decide.
                life.last_scrape_ok = now
                life.probe_task = self.reports.spawn(
                    self.probe(life, {"kind": "metrics_unreachable", "error": err})
                )
            nxt += interval
            await self.clock.sleep(max(0.0, nxt - self.clock()))
            if self.clock() - nxt > interval:
                nxt = self.clock()  # we fell behind (a slow scrape): do not burst to catch up

    async def probe(self, life: Life, trigger: dict[str, Any]) -> None:
        """A 1-token canary after a proxy stall; a failed one is a wedge."""
        try:
            if life.at_limit():
                skipped = CanarySkipped(
                    member=self.cfg.name,
                    life_id=life.life_id,
                    why="at concurrency limit",
                    trigger=trigger,
                    load=life.load(),
                )
                self.bus.publish(skipped)
                return
            res = await self.starter.canary(life)
            answered = CanaryAnswered(
                member=self.cfg.name, life_id=life.life_id, result=res.as_dict(), trigger=trigger
            )
            self.bus.publish(answered)
            if res.ok or life.ended:
                return
            # A killed server closes its sockets a few milliseconds before it can be reaped, so a
            # refused canary may come from a process not yet seen dead: that is a crash, not a wedge.
            for _ in range(DEATH_GRACE_POLLS):
                code = life.proc.poll()
                if code is not None:
                    self.reports.crash(life, code)
                    return
                await asyncio.sleep(0.05)
            evidence = {
                "source": "canary",
                "canary": res.as_dict(),
                "trigger": trigger,
                "samples": life.detector.evidence(),
            }
            await self.reports.wedge(life, evidence)
        finally:
            life.probe_task = None

    def hear(self, life: Life, ev: Event, probe: bool = True) -> None:
        """What the proxy saw on ``life``: a finished request counts toward its age; a refused
        connection from a dead process is a crash; a stall or an upstream error asks a canary, and
        so does a request the proxy holds because the server's /health said its engine is dead
        (``LifeInDoubt``): the verdict it waits for comes from the canary, now."""
        if isinstance(ev, LifeInDoubt):
            if ev.life_id == life.life_id and probe and not life.wedged and life.probe_task is None:
                doubt = {"event": ev.kind, "outcome": ev.outcome, "health": ev.health}
                life.probe_task = self.reports.spawn(self.probe(life, doubt))
            return
        if not isinstance(ev, RequestEnded) or ev.life_id not in (None, life.life_id):
            return  # not a request, or one an earlier life served
        life.proxy_requests += 1
        if isinstance(ev, RequestOk | Stalled):
            life.proxy_tokens += ev.tokens_out
        code = life.proc.poll() if isinstance(ev, UpstreamFailed) else None
        if code is not None:
            self.reports.crash(life, code)  # no canary needed
            return
        if probe and not isinstance(ev, RequestOk) and not life.wedged and life.probe_task is None:
            trigger = {
                **{k: v for k, v in ev.detail.items() if isinstance(v, str | int | float)},
                "event": ev.kind,
            }
            life.probe_task = self.reports.spawn(self.probe(life, trigger))
