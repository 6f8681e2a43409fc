"""The process groups that attempts' commands run in, so that a runner that stops can kill them.

Every command (a sandbox's ``bash -c``, a ``command`` agent's program) runs in a session of its own
and is killed with its whole group when it ends or times out. A runner stopped by SIGTERM or
Ctrl-C does not wait for that: it abandons its agent threads, so it kills the groups still listed
here instead of leaving them to run on, orphaned, to the end of their timeouts. The list is the
process's, not a run's: two runs stopping early in one process kill each other's commands too.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

_lock = threading.Lock()
_live: set[int] = set()


@contextmanager
def tracked(pgid: int) -> Iterator[None]:
    """List ``pgid`` while the block runs; the block itself kills and reaps the group."""
    with _lock:
        _live.add(pgid)
    try:
        yield
    finally:
        with _lock:
            _live.discard(pgid)


def running() -> int:
    """How many groups are listed now."""
    with _lock:
        return len(_live)


def kill_all() -> int:
    """SIGKILL every listed group; returns how many there were."""
    with _lock:
        groups = sorted(_live)
        _live.clear()
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if groups:
        log.warning("killed %d command process group(s) still running", len(groups))
    return len(groups)
