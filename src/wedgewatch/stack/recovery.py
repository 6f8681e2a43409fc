"""What a killed process left open, closed by the next process that opens the ledger.

A SIGKILL gives no process a chance to write its ends. ``run``, ``serve``, ``wrap``, ``proxy`` and
``demo`` therefore call ``recover`` before they start anything: every open fact whose writer was a
process of this pid space that is no longer alive (its pid gone, or taken by a process that
started at another time: this machine reuses pids) gets its end now.

- a request's start without an end: ended ``interrupted`` (the client was cut off with its proxy);
- a server life without an end: its server's process group is killed, once its pid is checked
  to still name that server (``orphaned``), or the life is ended ``lost`` when it is gone;
- a wrapped harness run without an end: ended ``interrupted``.

A writer of another host or pid namespace is never judged here: its pids mean nothing here.
Two processes recovering at once is harmless: each end is written once, the second is refused.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field

from wedgewatch.base.errors import LedgerConflict
from wedgewatch.base.processes import Identity, pid_space, start_time
from wedgewatch.base.vocab import INTERRUPTED, LOST, ORPHANED
from wedgewatch.ledger.store import Ledger, Row

log = logging.getLogger(__name__)


@dataclass
class Recovered:
    """What one recovery closed."""

    requests: list[str] = field(default_factory=list)
    lives: dict[str, str] = field(default_factory=dict)  # life_id -> end reason
    harness_runs: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.requests or self.lives or self.harness_runs)

    def line(self) -> str:
        stopped = sum(1 for r in self.lives.values() if r == ORPHANED)
        return (
            f"closed what a killed process left open: {len(self.requests)} request(s) ended "
            f"interrupted, {len(self.lives)} server life(s) ended ({stopped} server(s) stopped), "
            f"{len(self.harness_runs)} harness run(s) ended"
        )


def _dead(row: Row, prefix: str = "") -> bool:
    """Whether the writer a row names (``<prefix>pid``, ...) is a process of this pid space that
    no longer runs, and is not this process."""
    pid = row[f"{prefix}pid"]
    if pid is None or row[f"{prefix}pid_space"] != pid_space() or pid == os.getpid():
        return False
    return not Identity(int(pid), row[f"{prefix}pid_space"], row[f"{prefix}pid_start"]).alive()


def _append_once(ledger: Ledger, table: str, row: dict[str, object]) -> bool:
    try:
        ledger.append(table, row)
    except LedgerConflict:
        return False  # someone else closed it first
    return True


def _stop_server(life: Row) -> bool:
    """Kill the life's server's process group when its pid still names that server; True when
    it was alive. A leader that is gone may have left its group (an engine's workers): with no
    process at that pid, no new group can own it, so the group is killed too."""
    pid = life["pid"]
    if pid is None or life["pid_space"] != pid_space():
        return False
    now = start_time(int(pid))
    if now is not None and life["pid_start"] is not None and now != life["pid_start"]:
        return False  # the pid was reused: that is someone else's process
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(int(pid), signal.SIGKILL)  # servers run in their own group, led by pid
        return now is not None
    return False


def recover(ledger: Ledger) -> Recovered:
    """Close every open fact of this pid space's dead writers; returns what was closed."""
    done = Recovered()
    here = pid_space()
    now = time.time()
    for row in ledger.query(
        "SELECT s.* FROM request_starts s LEFT JOIN requests r ON r.request_id = s.request_id "
        "WHERE r.request_id IS NULL AND s.pid_space = ?",
        (here,),
    ):
        if not _dead(row):
            continue
        end = {
            "request_id": row["request_id"],
            "attempt_id": row["attempt_id"],
            "life_id": row["life_id"],
            "path": row["path"],
            "model": row["model"],
            "client_stream": row["client_stream"],
            "started_at": row["started_at"],
            "tokens_out": 0,
            # Unknown: the proxy died between the start and now. The time to now bounds it.
            "duration": round(max(0.0, now - float(row["started_at"])), 3),
            "outcome": INTERRUPTED,
            "detail_json": {"ended_by": "recovery", "duration_is_an_upper_bound": True},
        }
        if _append_once(ledger, "requests", end):
            done.requests.append(row["request_id"])
    for life in ledger.query(
        "SELECT l.* FROM server_lives l LEFT JOIN server_life_ends e ON e.life_id = l.life_id "
        "WHERE e.life_id IS NULL AND l.owner_pid_space = ?",
        (here,),
    ):
        if not _dead(life, "owner_"):
            continue
        reason = ORPHANED if _stop_server(life) else LOST
        end = {"life_id": life["life_id"], "ended_at": time.time(), "end_reason": reason, "exit_code": None}
        if _append_once(ledger, "server_life_ends", end):
            done.lives[life["life_id"]] = reason
    for run in ledger.query(
        "SELECT h.* FROM harness_runs h LEFT JOIN harness_run_ends e ON e.harness_run_id = h.harness_run_id "
        "WHERE e.harness_run_id IS NULL AND h.pid_space = ?",
        (here,),
    ):
        if not _dead(run):
            continue
        end = {
            "harness_run_id": run["harness_run_id"],
            "ended_at": time.time(),
            "exit_code": None,
            "end_reason": INTERRUPTED,
        }
        if _append_once(ledger, "harness_run_ends", end):
            done.harness_runs.append(run["harness_run_id"])
    if done:
        log.warning("%s: %s", ledger.path, done.line())
    return done
