"""The benchmarks' child processes: each in its own process group, pinned if asked, stopped whole."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from wedgewatch.bench.procfs import group_pids


def pinned(cpus: set[int] | None) -> Any:
    """A preexec_fn that keeps the child (and what it starts) on ``cpus``."""
    return None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))


def stop_group(p: subprocess.Popen[Any]) -> None:
    """TERM to the child's whole group, KILL if it lingers past 5 s; then no member is left."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:  # the leader may be gone while a member (an nginx worker) still runs
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if p.poll() is None:
        p.wait(5)
    # SIGKILL is delivered at once but a member's exit is not: wait until none is left running
    # (zombies aside), so "stopped" means stopped for whoever looks next.
    deadline = time.monotonic() + 5
    while group_pids(p.pid) and time.monotonic() < deadline:
        time.sleep(0.01)


class Server:
    """A child server in its own process group that printed ``listening on URL`` (``prefix`` URL)
    first."""

    def __init__(
        self,
        argv: list[str],
        log_path: Path,
        timeout: float = 60.0,
        cpus: set[int] | None = None,
        prefix: str = "listening on ",
    ) -> None:
        self.log = log_path.open("w")
        self.p = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
            preexec_fn=pinned(cpus),
        )
        assert self.p.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.p.stdout, selectors.EVENT_READ)
        line = self.p.stdout.readline().strip() if sel.select(timeout) else ""
        if not line.startswith(prefix):
            self.stop()
            raise RuntimeError(f"{argv[3:5]} did not start: {line!r}; see {log_path}")
        self.url = line.removeprefix(prefix)

    @property
    def pid(self) -> int:
        return self.p.pid

    def stop(self) -> None:
        stop_group(self.p)
        self.log.close()
