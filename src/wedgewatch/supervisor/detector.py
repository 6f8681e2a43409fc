"""Wedge detection from scraped metrics: work is present and nothing the engine does moves.

``/health`` is blind to a wedge (vLLM answers 200 with its engine frozen), so liveness here is
progress. Two rules (docs/supervisor.md): *tokens* (legacy: requests running, token counters flat
for ``wedge_window``) and *heartbeat* (requests running or waiting, neither the token counters
nor the heartbeat series moved for ``heartbeat_window``). The detector is pure logic over
readings, so deadlines are tested with a fake clock; the life it watches scrapes (``Life.scrape``)
and feeds it one reading per scrape.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from wedgewatch.supervisor.profiles import Series
from wedgewatch.wire import promtext
from wedgewatch.wire.heartbeat import Reading

_EVIDENCE_SAMPLES = 60
"""Readings kept as evidence of a wedge (the flat stretch, the latest ones)."""


def reduce(samples: promtext.Samples, series: Series, at: float, wall: float) -> Reading:
    counters = [samples.total(n) for n in series.token_counters]
    present = [c for c in counters if c is not None]
    return Reading(
        at=at,
        wall=wall,
        tokens=sum(present) if present else None,
        generated=counters[0] if counters else None,
        running=samples.total(series.running_gauge) if series.running_gauge else None,
        waiting=samples.total(series.waiting_gauge) if series.waiting_gauge else None,
        beat=tuple(samples.total(n) for n in series.heartbeat),
        preemptions=samples.total(series.preemptions) if series.preemptions else None,
    )


class WedgeDetector:
    """Fires once when work is present and nothing has moved for ``window`` seconds.

    ``heartbeat`` off (the tokens rule): work is ``running > 0`` and movement is the token
    counters. On: work is running *or waiting* requests and movement is the token counters or
    any heartbeat series. The still stretch starts at the last reading that showed movement (or
    the first one with work after an idle one), so a wedge is seen at most ``window + 2 x scrape
    interval`` after the engine's last step, and never sooner than ``window`` after it."""

    def __init__(self, window: float, heartbeat: bool = False) -> None:
        self.window = window
        self.heartbeat = heartbeat
        self._since: float | None = None
        self._last: Reading | None = None
        self._fired = False
        self._moving = True
        self._recent: deque[Reading] = deque(maxlen=_EVIDENCE_SAMPLES)

    @property
    def fired(self) -> bool:
        return self._fired

    @property
    def moving(self) -> bool:
        """Whether the last reading showed the engine moving (True before any reading)."""
        return self._moving

    def _work(self, r: Reading) -> bool:
        return r.has_work() if self.heartbeat else (r.running or 0) > 0 or r.held > 0

    def _moved(self, r: Reading, prev: Reading | None) -> bool:
        if prev is None:
            return True
        if self.heartbeat:
            return r.moved_since(prev)
        return r.tokens != prev.tokens or r.relayed != prev.relayed

    def observe(self, r: Reading) -> dict[str, Any] | None:
        """Feed one reading; returns the wedge evidence the first time the rule holds."""
        self._recent.append(r)
        if r.tokens is None or r.running is None:
            self._since = None  # cannot judge without both series
            self._last = None
            return None
        moved = self._moved(r, self._last)
        self._last = r
        self._moving = moved
        if not self._work(r):
            self._since = None  # idle: flat counters mean nothing
            return None
        if moved or self._since is None:
            self._since = r.at  # progress, or the first reading with work running
            return None
        return self._judge(r.at, r)

    def unreachable(self, now: float) -> dict[str, Any] | None:
        """Heartbeat rule: /metrics stopped answering. A server that answers not even its
        metrics while the last reading showed work is as still as a frozen one (a SIGSTOP looks
        exactly like this); the still stretch runs on from that reading."""
        last = self._last
        if not self.heartbeat or last is None or self._since is None or not self._work(last):
            return None
        evidence = self._judge(now, last)
        if evidence is not None:
            evidence["unreachable"] = True
        return evidence

    def _judge(self, now: float, r: Reading) -> dict[str, Any] | None:
        assert self._since is not None
        flat = now - self._since
        if flat < self.window or self._fired:
            return None
        self._fired = True
        return {
            "source": "metrics",
            "rule": "heartbeat" if self.heartbeat else "tokens",
            "window": self.window,
            "flat_seconds": round(flat, 3),
            "running": r.running,
            "waiting": r.waiting,
            "tokens": r.tokens,
            "samples": self.evidence(),
        }

    def evidence(self) -> list[list[Any]]:
        """Recent readings as ``[wall time, tokens, running, waiting]`` rows."""
        return [x.as_row() for x in self._recent]
