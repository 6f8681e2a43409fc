"""The four deadlines of one request, as plain arithmetic on an injected clock.

A ``Watch`` is told about progress (``progress(now)``) and asked for its earliest deadline
(``deadline()``); it owns no timer. The proxy arms one timer per request at that deadline and,
when it fires, asks ``check(now)``: either a ``Stall`` or the next deadline to re-arm at. So a
healthy stream costs one attribute store per token and one timer wake-up per ``stall_timeout``,
never a timer per chunk.

Trickle: "fewer than ``min_rate`` tokens/s over ``rate_window``" holds exactly when the N-th most
recent token (N = ceil(min_rate * rate_window)) is older than the window, so a ring of the last N
token times is all the history the check needs.

Engine deadlines (``engine=True``, when the server's heartbeat reaches the proxy): the first-token
and mid-stream deadlines count only *engine time*, handed in by ``charge`` after every scrape:
seconds in which the engine stepped while this request was neither waiting nor preempted. Queued
seconds never count, and they extend ``total_timeout`` too. A request the server preempted must
prefill again, so until its next token it is judged by the first-token deadline.

A request for one whole answer (``whole``: the client asked for no stream, and it goes upstream
as sent) has no tokens to watch: only ``total_timeout`` applies to it (extended by its queued
seconds under engine time), and the engine-stopped verdict (``engine_stopped``). A first-token or
mid-stream deadline on a whole generation would be a false alarm on every long answer.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

from wedgewatch.base.vocab import STALL_MIDSTREAM, STALL_TTFT, TOTAL_TIMEOUT, TRICKLE
from wedgewatch.config import WatchdogConfig


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
        "_busy",
        "_engine",
        "_engine_stall",
        "_engine_ttft",
        "_itl",
        "_need",
        "_queued",
        "_rate",
        "_refill",
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
        "whole",
    )

    def __init__(
        self, cfg: WatchdogConfig, start: float, itl: Buckets | None = None, engine: bool = False
    ) -> None:
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
        self._engine = engine
        self._engine_ttft = cfg.engine_ttft_timeout
        self._engine_stall = cfg.engine_stall_timeout
        self._busy = 0.0  # engine seconds since the last token (or the start)
        self._queued = 0.0  # seconds seen waiting or preempted
        self._refill = False  # preempted since the last token: prefilling again
        self.whole = False  # one whole answer, no stream: only the total deadline (see above)

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
        self._busy = 0.0
        self._refill = False
        if self._need:
            self._ring[self.tokens % self._need] = now
        self.tokens += 1

    def answered(self, tokens: int) -> None:
        """A whole answer came, of ``tokens`` generated tokens (its usage's): the row's
        ``tokens_out``. No first token nor gap is known, so ``ttft`` and ``max_gap`` stay null."""
        self.tokens = tokens

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.start

    @property
    def engine(self) -> bool:
        return self._engine

    def deadline(self) -> tuple[float, str]:
        """The earliest deadline given the tokens so far, and the stall kind it would be."""
        when, kind = self.start + self._total + self._queued, TOTAL_TIMEOUT
        if self.whole:
            return when, kind
        if self._engine:
            if self._need and self.first is not None:
                anchor = self._ring[self.tokens % self._need] if self.tokens >= self._need else self.first
                if anchor + self._window < when:
                    when, kind = anchor + self._window, TRICKLE
            return when, kind
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

    def charge(
        self, now: float, dt: float, stepping: bool, queued: bool, preempted: bool = False
    ) -> Stall | None:
        """Engine deadlines: ``dt`` seconds passed in which the engine stepped (or not), with
        this request waiting in the server's queue (or not); a ``Stall`` once a budget is spent."""
        if not self._engine:
            return None
        if preempted:
            self._refill, self._busy = True, 0.0
        if queued:
            self._queued += dt
            if self.first is not None:
                self._refill, self._busy = True, 0.0
            return None
        if not stepping or self.whole:
            return None
        self._busy += dt
        if self.first is None or self._refill:
            if self._busy >= self._engine_ttft:
                return self._stall_of(STALL_TTFT, now)
        elif self._busy >= self._engine_stall:
            return self._stall_of(STALL_MIDSTREAM, now)
        return None

    def engine_stopped(self, now: float, still_for: float, window: float) -> Stall:
        """The whole engine stopped (the heartbeat rule's verdict): this request can never end."""
        kind = STALL_TTFT if self.first is None else STALL_MIDSTREAM
        msg = (
            f"the server's engine stopped: nothing moved for {still_for:.1f} s with requests in it "
            f"(heartbeat_window {window:g} s), after {self.tokens} tokens"
        )
        return Stall(
            kind,
            now - self.start,
            self._since_last(now),
            self.tokens,
            window,
            msg + "; the upstream request was aborted",
        )

    def _since_last(self, now: float) -> float:
        return now - (self.last if self.last is not None else self.start)

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
        if kind == STALL_TTFT and self._engine:
            window = self._engine_ttft
            again = " since it was preempted" if self.first is not None else ""
            msg = (
                f"no token{again} in {self._busy:.1f} s of engine time ({elapsed:.1f} s in all, "
                f"{self._queued:.1f} s queued; engine_ttft_timeout {window:g} s)"
            )
        elif kind == STALL_MIDSTREAM and self._engine:
            window = self._engine_stall
            msg = (
                f"no token in {self._busy:.1f} s of engine time after {n} tokens, while the engine "
                f"served others (engine_stall_timeout {window:g} s)"
            )
        elif kind == STALL_TTFT:
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


def engine_deadlines(cfg: WatchdogConfig, has_heartbeat: bool) -> bool:
    """Whether requests are judged by engine time (``deadlines``; docs/proxy.md). ``auto`` is
    engine time unless the config sets a wall-clock deadline of its own."""
    if not has_heartbeat or cfg.deadlines == "wall":
        return False
    if cfg.deadlines == "engine":
        return True
    return not ({"ttft_timeout", "stall_timeout"} & cfg.model_fields_set)
