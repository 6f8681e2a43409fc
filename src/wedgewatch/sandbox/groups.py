"""The process groups that attempts' commands run in, so that a run that stops can kill them.

Every command (a sandbox's ``bash -c``, a ``command`` agent's program) runs in a session of its own
and is killed with its whole group when it ends or times out. A run stopped by SIGTERM or Ctrl-C
does not wait for that: it abandons its agent threads, so it closes its ``Groups`` instead, which
kills every group still listed and refuses to start any more.

Race-free by construction: ``spawn`` holds the list's lock across ``Popen`` and the listing, and
``close`` takes the same lock. A command is therefore either listed before ``close`` reads the list
(and killed), or started after it (and refused): there is no moment in which a command runs
unlisted. Each run has its own list (``scope``, carried to agent threads by ``contextvars``), so
one run stopping early never kills another's commands in the same process.

A list can have a watcher (``sandbox.reaper``: a process that kills the listed groups if this
process dies); it hears of every group as it is listed and released, under the same lock.
"""

from __future__ import annotations

import contextvars
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from wedgewatch.base.errors import SandboxError

log = logging.getLogger(__name__)


class Watcher(Protocol):
    def listed(self, pgid: int) -> None: ...

    def released(self, pgid: int) -> None: ...


class Groups:
    """The live process groups of one run's commands."""

    def __init__(self, watcher: Watcher | None = None) -> None:
        self._lock = threading.Lock()
        self._live: set[int] = set()
        self._closed = False
        self._watcher = watcher

    def spawn(self, argv: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` in a new session and list its group before anyone can see it run."""
        with self._lock:
            if self._closed:
                raise SandboxError(f"the run is stopping: {argv[0]!r} was not started")
            proc: subprocess.Popen[bytes] = subprocess.Popen(argv, start_new_session=True, **popen)
            self._live.add(proc.pid)
            if self._watcher is not None:
                self._watcher.listed(proc.pid)
        return proc

    def release(self, pgid: int) -> None:
        """Unlist a group whose owner has killed and reaped it."""
        with self._lock:
            self._live.discard(pgid)
            if self._watcher is not None:
                self._watcher.released(pgid)

    def running(self) -> int:
        with self._lock:
            return len(self._live)

    def close(self) -> int:
        """SIGKILL every listed group and refuse new ones; returns how many were killed."""
        with self._lock:
            self._closed = True
            pgids = sorted(self._live)
            self._live.clear()
            for pgid in pgids:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                if self._watcher is not None:
                    self._watcher.released(pgid)  # killed: a watcher must not kill its pgid again
        if pgids:
            log.warning("killed %d command process group(s) still running", len(pgids))
        return len(pgids)


# Commands started outside any run (a sandbox used on its own, a test) are listed here; it is
# never closed.
_process_wide = Groups()
_current: contextvars.ContextVar[Groups] = contextvars.ContextVar("wedgewatch_groups")


def current() -> Groups:
    """The list of the run this code runs for (asyncio tasks and ``run_in_thread`` carry it)."""
    return _current.get(_process_wide)


@contextmanager
def scope(groups: Groups | None = None) -> Iterator[Groups]:
    """A fresh list (or ``groups``) for the block: a run's execution, or one attempt on a Ray
    worker; the caller closes it on an early stop."""
    groups = groups if groups is not None else Groups()
    token = _current.set(groups)
    try:
        yield groups
    finally:
        _current.reset(token)


def spawn(argv: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
    """``Groups.spawn`` on the current run's list."""
    return current().spawn(argv, **popen)


@contextmanager
def owned(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """Unlist ``proc``'s group when the block ends; the block itself kills and reaps it."""
    groups = current()
    try:
        yield
    finally:
        groups.release(proc.pid)
