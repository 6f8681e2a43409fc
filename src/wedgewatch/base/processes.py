"""Which process a pid names: this boot's pid space and the process's start time, so a pid the
kernel has handed to someone else since is never taken for the process a ledger row recorded.

This machine kind reuses pids within one test run; a SIGKILLed ``serve`` leaves its server
running, and whoever cleans up after it must kill that server and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path


def pid_space() -> str:
    """Where a pid names one process: this boot of the kernel and this pid namespace. Another
    host, or another container on this one, has another."""
    boot = ""
    with contextlib.suppress(OSError):
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        ns = 0
    return f"{boot or socket.gethostname()}:{ns}"


def start_time(pid: int) -> str | None:
    """The process's start (clock ticks after boot, /proc/<pid>/stat field 22), None when there
    is no such process, or only its zombie: with the pid, it names one process even after the
    pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


@dataclass(frozen=True, slots=True)
class Identity:
    """One process, as a ledger row records it (columns ``pid``, ``pid_space``, ``pid_start``)."""

    pid: int
    space: str
    start: str | None

    @classmethod
    def of(cls, pid: int) -> Identity:
        return cls(pid, pid_space(), start_time(pid))

    @classmethod
    def me(cls) -> Identity:
        return cls.of(os.getpid())

    def columns(self, prefix: str = "") -> dict[str, object]:
        return {f"{prefix}pid": self.pid, f"{prefix}pid_space": self.space, f"{prefix}pid_start": self.start}

    def here(self) -> bool:
        """Whether this process's pids are ours to see (same boot, same pid namespace)."""
        return self.space == pid_space()

    def alive(self) -> bool:
        """Whether the recorded process still runs here: its pid is taken by a process that
        started when it did. A process of another pid space is not judged (False: not here)."""
        if not self.here():
            return False
        now = start_time(self.pid)
        return now is not None and (self.start is None or now == self.start)
