"""The four deadlines of one request, as plain arithmetic on an injected clock.

A ``Watch`` is told about progress (``progress(now)``) and asked for its earliest deadline
(``deadline()``); it owns no timer. The proxy arms one timer per request at that deadline and,
when it fires, asks ``check(now)``: either a ``Stall`` or the next deadline to re-arm at. So a
healthy stream costs one attribute store per token and one timer wake-up per ``stall_timeout``,
never a timer per chunk.

Trickle: "fewer than ``min_rate`` tokens/s over ``rate_window``" holds exactly when the N-th most
recent token (N = ceil(min_rate * rate_window)) is older than the window, so a ring of the last N
token times is all the history the check needs.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

from wedgewatch.config import WatchdogConfig
from wedgewatch.vocab import STALL_MIDSTREAM, STALL_TTFT, TOTAL_TIMEOUT, TRICKLE


class Buckets:
    """A histogram cheap enough to observe once per token (prometheus_client's takes a lock)."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1


@dataclass(frozen=True, slots=True)
class Stall:
    """Why and when a request was given up on; ``message`` is the sentence the client reads."""

    kind: str
    elapsed: float  # seconds since the request started
    since_last_token: float  # seconds since the last token (or since the start, before the first)
    tokens: int
    window: float  # the configured deadline that ran out
    message: str

    def detail(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "elapsed": round(self.elapsed, 3),
            "since_last_token": round(self.since_last_token, 3),
            "tokens_out": self.tokens,
            "window": self.window,
        }


class Watch:
    """Deadline state of one request. All times are readings of the proxy's clock."""

    __slots__ = (
        "_itl",
        "_need",
        "_rate",
        "_ring",
        "_stall",
        "_total",
        "_ttft",
        "_window",
        "first",
        "last",
        "max_gap",
        "start",
        "tokens",
    )

    def __init__(self, cfg: WatchdogConfig, start: float, itl: Buckets | None = None) -> None:
        self.start = start
        self.first: float | None = None
        self.last: float | None = None
        self.tokens = 0
        self.max_gap = 0.0
        self._ttft = cfg.ttft_timeout
        self._stall = cfg.stall_timeout
        self._total = cfg.total_timeout
        self._rate = cfg.min_rate
        self._window = cfg.rate_window
        self._need = math.ceil(cfg.min_rate * cfg.rate_window) if cfg.min_rate > 0 else 0
        self._ring = [0.0] * self._need
        self._itl = itl

    def progress(self, now: float) -> None:
        """One token-bearing chunk arrived at ``now``."""
        last = self.last
        if last is None:
            self.first = now
        else:
            gap = now - last
            if gap > self.max_gap:
                self.max_gap = gap
            if self._itl is not None:
                self._itl.observe(gap)
        self.last = now
        if self._need:
            self._ring[self.tokens % self._need] = now
        self.tokens += 1

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.start

    def deadline(self) -> tuple[float, str]:
        """The earliest deadline given the tokens so far, and the stall kind it would be."""
        when, kind = self.start + self._total, TOTAL_TIMEOUT
        if self.first is None or self.last is None:
            t = self.start + self._ttft
            if t <= when:
                when, kind = t, STALL_TTFT
            return when, kind
        t = self.last + self._stall
        if t <= when:
            when, kind = t, STALL_MIDSTREAM
        if self._need:
            anchor = self._ring[self.tokens % self._need] if self.tokens >= self._need else self.first
            t = anchor + self._window
            if t < when:
                when, kind = t, TRICKLE
        return when, kind

    def check(self, now: float) -> Stall | float:
        """A ``Stall`` if a deadline has passed at ``now``, else the next deadline to wait for."""
        when, kind = self.deadline()
        if now < when:
            return when
        return self._stall_of(kind, now)

    def in_window(self, now: float) -> int:
        """Tokens in the last ``rate_window`` seconds (at most N: only N times are kept)."""
        if not self._need:
            return 0
        cutoff = now - self._window
        return sum(1 for t in self._ring[: min(self.tokens, self._need)] if t > cutoff)

    def _stall_of(self, kind: str, now: float) -> Stall:
        elapsed = now - self.start
        since = now - (self.last if self.last is not None else self.start)
        n = self.tokens
        if kind == STALL_TTFT:
            window = self._ttft
            msg = f"no first token within {elapsed:.1f} s (ttft_timeout {window:g} s)"
        elif kind == STALL_MIDSTREAM:
            window = self._stall
            msg = f"no token for {since:.1f} s after {n} tokens (stall_timeout {window:g} s)"
        elif kind == TRICKLE:
            window = self._window
            got = self.in_window(now)
            msg = (
                f"{got} tokens in the last {window:g} s ({got / window:.2f} tokens/s), "
                f"below min_rate {self._rate:g} tokens/s"
            )
        else:
            window = self._total
            msg = f"request ran {elapsed:.1f} s with {n} tokens, past total_timeout {window:g} s"
        return Stall(kind, elapsed, since, n, window, msg + "; the upstream request was aborted")
