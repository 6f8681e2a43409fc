"""Wedge detection from scraped metrics: requests are running, and the token counters are flat.

``/health`` is blind to a wedge (vLLM answers 200 with its engine frozen), so liveness here is
token progress. The detector is pure logic over readings, so deadlines are tested with a fake
clock; the life it watches scrapes (``Life.scrape``) and feeds it one reading per scrape.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from wedgewatch import promtext
from wedgewatch.supervisor.profiles import Series

_EVIDENCE_SAMPLES = 60
"""Readings kept as evidence of a wedge (the flat stretch, the latest ones)."""


@dataclass(frozen=True, slots=True)
class Reading:
    """One scrape, reduced to what the detector needs."""

    at: float  # the supervisor's clock (monotonic)
    wall: float  # time.time(), for the ledger
    tokens: float | None  # sum of the token counters
    generated: float | None  # the first counter: tokens generated
    running: float | None
    waiting: float | None

    def as_row(self) -> list[Any]:
        return [round(self.wall, 3), self.tokens, self.running, self.waiting]


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
    )


class WedgeDetector:
    """Fires once when ``running > 0`` and the token counters have not moved for ``window``
    seconds. The flat stretch starts at the last reading that showed progress (or the first one
    with work running after an idle one), so a wedge is seen at most ``window + 2 x scrape
    interval`` after its last token, and never sooner than ``window`` after it."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._since: float | None = None
        self._last_tokens: float | None = None
        self._fired = False
        self._recent: deque[Reading] = deque(maxlen=_EVIDENCE_SAMPLES)

    @property
    def fired(self) -> bool:
        return self._fired

    def flat_for(self, now: float) -> float:
        """Seconds the counters have been flat with work running (0 when not)."""
        return 0.0 if self._since is None else max(0.0, now - self._since)

    def observe(self, r: Reading) -> dict[str, Any] | None:
        """Feed one reading; returns the wedge evidence the first time the rule holds."""
        self._recent.append(r)
        if r.tokens is None or r.running is None:
            self._since = None  # cannot judge without both series
            return None
        moved = self._last_tokens is None or r.tokens != self._last_tokens
        self._last_tokens = r.tokens
        if r.running <= 0:
            self._since = None  # idle: flat counters mean nothing
            return None
        if moved or self._since is None:
            self._since = r.at  # progress, or the first reading with work running
            return None
        flat = r.at - self._since
        if flat < self.window or self._fired:
            return None
        self._fired = True
        return {
            "source": "metrics",
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
