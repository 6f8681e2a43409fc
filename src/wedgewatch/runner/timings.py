"""The runner's own cost, measured as it runs (``wedgewatch bench runner`` reads it): CPU and wall
seconds of its synchronous sections, and its ledger writes."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


class Span:
    """Wall and CPU seconds of the event loop's thread over the runner's synchronous sections.
    CPU time (``time.thread_time``) is the runner's own cost; wall time adds waiting for the GIL
    while agent threads run Python."""

    __slots__ = ("_cpu0", "_wall0", "cpu", "wall")

    def __init__(self) -> None:
        self.cpu = self.wall = self._cpu0 = self._wall0 = 0.0

    def start(self) -> None:
        self._wall0, self._cpu0 = time.perf_counter(), time.thread_time()

    def stop(self) -> None:
        self.wall += time.perf_counter() - self._wall0
        self.cpu += time.thread_time() - self._cpu0


@dataclass
class Timings:
    """The runner's own cost per attempt (seconds), excluding the agent and the sandbox."""

    overhead: list[tuple[float, float]] = field(default_factory=list)  # (cpu, wall) per attempt
    decisions: list[tuple[float, float]] = field(default_factory=list)  # each instance_next lookup
    ledger_writes: int = 0
    ledger_seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_write(self, seconds: float, rows: int = 1) -> None:
        with self.lock:
            self.ledger_writes += rows
            self.ledger_seconds += seconds
