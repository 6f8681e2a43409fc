"""Time as the panels show it: a duration in words, and the one axis every lane of a scope shares
(seconds of the scope's window as percentages of a lane's width)."""

from __future__ import annotations

from typing import Any


def duration(seconds: float | None) -> str:
    """``1h 02m``, ``3m 05s``, ``12s``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = max(0, round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"


class Axis:
    """Seconds of the scope's window as percentages of the lane's width."""

    def __init__(self, t0: float, t1: float) -> None:
        self.t0, self.t1 = t0, max(t1, t0 + 1.0)

    def at(self, t: float | None) -> float:
        if t is None:
            return 100.0
        return round(min(100.0, max(0.0, (t - self.t0) / (self.t1 - self.t0) * 100.0)), 3)

    def ticks(self, n: int = 5) -> list[dict[str, Any]]:
        span = self.t1 - self.t0

        def label(t: float) -> str:
            return f"{t:.1f}s" if span < 20 else duration(t)  # a short window: tenths, not repeats

        return [{"at": round(i * 100.0 / n, 3), "label": label(span * i / n)} for i in range(n + 1)]
