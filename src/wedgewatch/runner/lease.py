"""Runners and their leases: which processes work on a run, and which of them are alive.

Each execution of a run (``run``, ``--resume``, ``--join``) is a *runner*: a ``runners`` row (its
host, its pid and where that pid means this process, its lease) and, when it stops, a
``runner_ends`` row. When the ledger is shared (PostgreSQL: several runners, several hosts) it also
appends a ``runner_beats`` row every ``run.lease_interval`` seconds, from a thread of its own, so a
busy event loop or agent threads cannot starve it. A beat is stamped with the database's clock,
and leases are judged by that clock: hosts whose clocks disagree do not matter.

A runner is dead when it has an end row; when it ran where this process sees its pids (the same
boot and pid namespace) and its process is gone (a SIGKILL is seen at once, without waiting for a
lease); or when its last beat is older than its lease (a host that crashed, was cut off, or hangs).
``reap`` ends a dead runner's attempts in flight ``interrupted``/``runner_lost`` (not budgeted:
they are attempted again) and the runner ``lost``. A runner that finds itself ended ``lost`` by
another stops (``RunnerLost``): the others have taken its work over.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wedgewatch import __version__
from wedgewatch.base.errors import LedgerConflict
from wedgewatch.base.events import Event, ServerStarting
from wedgewatch.base.processes import pid_space, start_time
from wedgewatch.base.vocab import INTERRUPTED, LOST, RUNNER_LOST
from wedgewatch.config import RunConfig
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger, Row
from wedgewatch.runner import orphans
from wedgewatch.stack import recovery

log = logging.getLogger(__name__)


def append_once(ledger: Ledger, table: str, row: Mapping[str, Any]) -> bool:
    """Append a fact that may already be there (someone else ended it first): False then."""
    try:
        ledger.append(table, row)
    except LedgerConflict:
        return False
    return True


@dataclass(frozen=True)
class RunnerState:
    runner_id: str
    host: str
    pid: int
    here: bool  # its pids are this process's to see (same boot, same pid namespace)
    ended: str | None  # runner_ends.how
    dead: str | None  # why it is taken for dead; None: alive

    @property
    def alive(self) -> bool:
        return self.dead is None


def _judge(row: Row, now: float, here: str) -> str | None:
    """Why the runner of ``row`` is dead, or None while it is alive."""
    if row["ended"] is not None:
        return f"ended {row['ended']}"
    if row["pid_space"] == here:
        if row["pid"] == os.getpid():
            return None  # this process
        started = start_time(int(row["pid"]))
        if started is None or (row["pid_start"] is not None and started != row["pid_start"]):
            return f"its process {row['pid']} is gone"
    elif row["lease_seconds"] is None:
        # A one-writer (SQLite) run last written from elsewhere: no lease tells, and one writer
        # at a time is the rule there, so whoever opens it now is in charge.
        return "no lease, and its pid is not visible from here"
    if row["lease_seconds"] is not None and not queries.lease_holds(row, now):
        last = row["last_beat"]
        age = "no beat" if last is None else f"last beat {now - float(last):.1f}s ago"
        return f"its lease ran out ({age}, lease {float(row['lease_seconds']):g}s)"
    return None


def runners_of(ledger: Ledger, run_id: str) -> list[RunnerState]:
    """The run's runners, oldest first, each judged alive or dead now."""
    # "now" is read before the beats: a process paused between the two reads (SIGSTOP, a VM
    # pause) then judges with beats newer than its "now", never with stale ones against a fresh
    # one. The other order made a runner woken from a stop end a live runner as lost.
    now, here = ledger.now(), pid_space()
    rows = queries.runners(ledger, run_id)
    if not rows:
        return []
    return [
        RunnerState(
            r["runner_id"], r["host"], int(r["pid"]), r["pid_space"] == here, r["ended"], _judge(r, now, here)
        )
        for r in rows
    ]


def reap(ledger: Ledger, run_id: str, by: str | None) -> list[str]:
    """End the attempts in flight of the run's dead runners (``interrupted``/``runner_lost``) and
    those runners (``lost``); return the attempts ended. Another runner doing the same at the same
    moment is harmless: each end is written once, the second is refused and skipped."""
    dead = {s.runner_id: s for s in runners_of(ledger, run_id) if not s.alive}
    if not dead:
        return []
    ended: list[str] = []
    for row in queries.in_flight(ledger, run_id):
        state = dead.get(row["runner_id"])
        if state is None:
            continue  # alive, or from before schema 6 (only a resume ends those)
        end = {
            "attempt_id": row["attempt_id"],
            "ended_at": time.time(),
            "status": INTERRUPTED,
            "reason": RUNNER_LOST,
            "life_id": row["life_id"],
            "detail_json": {"runner_id": state.runner_id, "why": state.dead, "by": by},
        }
        if append_once(ledger, "attempt_ends", end):
            ended.append(row["attempt_id"])
    # Their servers: stopped where their pids are visible (a SIGKILLed runner leaves its server
    # running in its own process group), ended either way.
    for life in ledger.query(
        "SELECT l.*, rl.runner_id AS owner FROM runner_lives rl JOIN server_life_view l "
        "ON l.life_id = rl.life_id WHERE l.run_id = ? AND l.ended_at IS NULL",
        (run_id,),
    ):
        if life["owner"] in dead:
            orphans.end_life(ledger, life, here=dead[life["owner"]].here)
    # Their proxies' requests in flight (and whatever else a dead process of this host left open).
    recovery.recover(ledger)
    end_dead(ledger, list(dead.values()), by)
    if ended:
        log.warning("%s: ended %d attempt(s) of dead runner(s): %s", run_id, len(ended), ended)
    return ended


def end_dead(ledger: Ledger, states: list[RunnerState], by: str | None) -> None:
    """A ``lost`` end for each dead runner that has no end yet (after its attempts' ends)."""
    for s in states:
        if s.ended is None and not s.alive:
            append_once(
                ledger,
                "runner_ends",
                {
                    "runner_id": s.runner_id,
                    "ended_at": time.time(),
                    "how": LOST,
                    "detail_json": {"why": s.dead, "by": by},
                },
            )


class Runner:
    """This process's runner row, its beats (shared ledgers only) and its end."""

    def __init__(self, ledger: Ledger, run_id: str, role: str, settings: RunConfig) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.role = role
        self.host = socket.gethostname()
        self.runner_id = f"{self.host}-{os.getpid()}-{secrets.token_hex(3)}"
        self.interval = settings.lease_interval
        self.lease = settings.lease_timeout if ledger.shared else None
        self.lost = threading.Event()  # set when another runner ended this one lost
        self._renewed = time.monotonic()  # the last beat written (monotonic: it runs on in a SIGSTOP)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        pid = os.getpid()
        row = {
            "runner_id": self.runner_id,
            "run_id": self.run_id,
            "role": self.role,
            "host": self.host,
            "pid": pid,
            "pid_space": pid_space(),
            "pid_start": start_time(pid),
            "started_at": time.time(),
            "lease_seconds": self.lease,
            "tool_version": __version__,
        }
        if self.lease is None:
            self.ledger.append("runners", row)
            return
        # The first beat in the same transaction: a runner is never seen without one.
        self.ledger.append_all([("runners", [row]), ("runner_beats", [{"runner_id": self.runner_id}])])
        self._thread = threading.Thread(target=self._beat, name="runner-lease", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.ledger.append("runner_beats", {"runner_id": self.runner_id})
                self._renewed = time.monotonic()
                if self._ended():
                    return
            except Exception as exc:  # the database away for a moment: the lease is there for that
                log.warning("runner %s: no beat written: %s", self.runner_id, exc)

    def _ended(self) -> bool:
        ends = self.ledger.query("SELECT how FROM runner_ends WHERE runner_id = ?", (self.runner_id,))
        if ends:
            log.error("runner %s was ended %s by another runner of the run", self.runner_id, ends[0][0])
            self.lost.set()
        return bool(ends)

    def is_lost(self) -> bool:
        """Whether the run's other runners took this one for dead. Asked before each new piece of
        work: when no beat was written for longer than the lease (this process was stopped, or
        cut off from the database), the others may have judged it dead meanwhile, so it looks
        before it claims anything rather than waiting for its next beat."""
        if self.lost.is_set():
            return True
        if self.lease is None or time.monotonic() - self._renewed <= self.lease:
            return False
        try:
            return self._ended()
        except Exception:  # the database is still away: claiming would fail anyway
            return False

    def on_event(self, ev: Event) -> None:
        """Subscribed to the stack's bus: each server life this runner starts is linked to it."""
        if isinstance(ev, ServerStarting) and ev.life_id:
            append_once(self.ledger, "runner_lives", {"life_id": ev.life_id, "runner_id": self.runner_id})

    def close(self, how: str) -> None:
        """Stop beating and write this runner's end (unless another runner wrote it: lost)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        append_once(
            self.ledger, "runner_ends", {"runner_id": self.runner_id, "ended_at": time.time(), "how": how}
        )
