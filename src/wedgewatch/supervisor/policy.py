"""When to restart besides a wedge or a crash, and when to give up.

Pure bookkeeping over counts (no I/O), so each rule is unit-tested on its own.
"""

from __future__ import annotations

import re

from wedgewatch.base.errors import ServerStartError, WarmupError
from wedgewatch.base.vocab import API_ERRORS, RECYCLE_INSTANCES, RECYCLE_TOKENS
from wedgewatch.config import ServerConfig

BACKOFF_CAP = 60.0
"""Longest wait between two failed starts: doubling past a minute only delays the clear error."""


_LIFE_ID = re.compile(r"life-[0-9a-f]+")


def failure_signature(exc: BaseException) -> str:
    """What makes two start failures "the same way": the error's class and its first clause
    ("server exited with code 1 during start-up"), without the life's own id or log path."""
    head = re.split(r"[;\n]", str(exc), maxsplit=1)[0]
    return f"{type(exc).__name__}: {_LIFE_ID.sub('life-*', head)}"


class RestartPolicy:
    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self.restarts = 0  # unplanned restarts this run (planned recycling does not count)
        self.api_errors = 0  # consecutive, on the current life
        self.instances = 0
        self.same_failures = 0  # start failures in a row with one signature
        self._last_failure: str | None = None

    def life_ready(self) -> None:
        """A new life starts with a clean slate of API errors (and of start failures)."""
        self.api_errors = 0
        self.same_failures = 0
        self._last_failure = None

    def start_failed(self, why: BaseException) -> None:
        """One more failed start; the ``max_same_start_failures``-th in a row that failed the same
        way (``failure_signature``) raises the clear error at once, the log's tail in ``why``."""
        signature = failure_signature(why)
        self.same_failures = self.same_failures + 1 if signature == self._last_failure else 1
        self._last_failure = signature
        n = self.cfg.max_same_start_failures
        if self.same_failures >= n:
            cls = WarmupError if isinstance(why, WarmupError) else ServerStartError
            raise cls(
                f"the server failed to start the same way {n} times in a row "
                f"(server.max_same_start_failures); the last: {why}"
            ) from why

    def attempt(self, api_error: bool) -> str | None:
        """``api_errors`` once ``restart_after_api_errors`` attempts in a row failed on the API."""
        self.api_errors = self.api_errors + 1 if api_error else 0
        n = self.cfg.restart_after_api_errors
        if n and self.api_errors >= n:
            self.api_errors = 0
            return API_ERRORS
        return None

    def instance_done(self) -> str | None:
        self.instances += 1
        n = self.cfg.recycle_every_instances
        return RECYCLE_INSTANCES if n and self.instances % n == 0 else None

    def tokens(self, generated: int) -> str | None:
        n = self.cfg.recycle_every_tokens
        return RECYCLE_TOKENS if n and generated >= n else None

    def count(self, why: BaseException, kind: str) -> None:
        """Spend one restart of the budget; past ``max_restarts`` raise the clear error."""
        self.restarts += 1
        if self.restarts > self.cfg.max_restarts:
            cls = WarmupError if isinstance(why, WarmupError) else ServerStartError
            raise cls(
                f"gave up after {self.restarts - 1} restarts (max_restarts); last {kind}: {why}"
            ) from why

    def backoff(self, failures: int) -> float:
        """Seconds before start attempt ``failures + 1`` after ``failures`` failed ones in a row."""
        if failures <= 0:
            return 0.0
        return float(min(BACKOFF_CAP, self.cfg.restart_backoff * 2 ** (failures - 1)))
