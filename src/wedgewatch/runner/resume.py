"""Resume: after a crash, Ctrl-C or SIGKILL, pick a run up where the ledger says it is.

Nothing is rewritten. Attempts that started and never ended get a new ``attempt_ends`` row with
status ``interrupted``; server lives the dead run left running are stopped and get their end row
(``orphaned``); a raised attempt budget (``--attempts N``) is a ``run_changes`` row, which turns
the run's ``infra_failed`` instances back into pending ones; a ``resumed`` run mark records what
was found. Then the run goes on with every instance whose outcome is not final (the
``instance_next`` view).
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from wedgewatch.base.errors import BadInput
from wedgewatch.base.processes import pid_space
from wedgewatch.base.vocab import FOUND_ON_RESUME, INTERRUPTED, ORPHANED, RUN_STARTS
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger
from wedgewatch.runner import lease, orphans

log = logging.getLogger(__name__)


def check_not_running(ledger: Ledger, run_id: str) -> None:
    """Refuse to resume a run a runner is still working on (two resumes would double up; another
    runner is added with --join). Its runners say (runner/lease.py: the pid where this process
    can see it, else the lease); a run from before schema 6 has only its marks' pid."""
    states = lease.runners_of(ledger, run_id)
    if states:
        alive = [s for s in states if s.alive]
        if alive:
            who = ", ".join(f"{s.host} pid {s.pid}" for s in alive)
            raise BadInput(
                f"run {run_id} is still running ({who}); stop it before --resume, "
                f"or add a runner with --join {run_id} (a PostgreSQL ledger)"
            )
        return
    marks = queries.run_marks(ledger, run_id)
    if not marks or marks[-1]["kind"] not in RUN_STARTS:
        return
    detail = json.loads(marks[-1]["detail_json"] or "{}")
    pid = detail.get("pid")
    if isinstance(pid, int) and pid != os.getpid() and orphans.alive_as(pid, None):
        raise BadInput(f"run {run_id} is still running (pid {pid}); stop it before --resume")


def _elsewhere(ledger: Ledger, run_id: str) -> set[str]:
    """Server lives of the run whose pid would name another process here. A run all of whose
    runners ran here (or from before schema 6) has none. Otherwise a life counts as here only when
    an attempt of a runner from here ran on it: a pid is never killed on a guess."""
    here = pid_space()
    spaces = {r[0] for r in ledger.query("SELECT pid_space FROM runners WHERE run_id = ?", (run_id,))}
    if spaces <= {here}:
        return set()
    rows = ledger.query(
        "SELECT DISTINCT a.life_id FROM attempts a JOIN runners r ON r.runner_id = a.runner_id "
        "WHERE a.run_id = ? AND r.pid_space = ?",
        (run_id, here),
    )
    local = {r[0] for r in rows}
    return {life["life_id"] for life in queries.server_lives(ledger, run_id)} - local


def stop_orphans(ledger: Ledger, run_id: str) -> list[str]:
    """Stop server lives of this run that have no end row and whose process is still alive here.
    A life on another host cannot be reached from here: it gets its end (``elsewhere``), and its
    host's operator stops its process."""
    elsewhere = _elsewhere(ledger, run_id)
    found: list[str] = []
    for life in queries.server_lives(ledger, run_id):
        here = life["life_id"] not in elsewhere
        if life["ended_at"] is None and orphans.end_life(ledger, life, here) == ORPHANED:
            found.append(life["life_id"])
    return found


def mark_interrupted(ledger: Ledger, run_id: str) -> list[str]:
    """Give every attempt in flight its end: ``interrupted`` (one at a time: another resume or
    runner ending one of them first is not an error), then its dead runners theirs: ``lost``."""
    ended = []
    now = time.time()
    heard: dict[str | None, float | None] = {}  # per runner: several attempts, one question
    for r in queries.in_flight(ledger, run_id):
        # It ended when its runner was last heard from: the hours a killed run waits for its
        # resume are not time the attempt (and the infrastructure) spent.
        if r["runner_id"] not in heard:
            heard[r["runner_id"]] = queries.last_seen(ledger, run_id, r["runner_id"])
        seen = heard[r["runner_id"]]
        end = now if seen is None else min(now, max(float(r["started_at"]), seen))
        row = {
            "attempt_id": r["attempt_id"],
            "ended_at": end,
            "status": INTERRUPTED,
            "reason": FOUND_ON_RESUME,
            "life_id": r["life_id"],
            "detail_json": {"resumed_by_pid": os.getpid(), "found_at": now},
        }
        if lease.append_once(ledger, "attempt_ends", row):
            ended.append(r["attempt_id"])
    lease.end_dead(ledger, lease.runners_of(ledger, run_id), by=None)
    return ended


def raise_attempts(ledger: Ledger, run_id: str, attempts: int) -> dict[str, Any] | None:
    """Record ``run.attempts = attempts`` as a change of the run (None when it is already that).
    The budget is only ever raised: lowering it would turn finished work into infra_failed."""
    current = int(queries.budgets(ledger, run_id)["attempts_max"])
    if attempts < current:
        raise BadInput(
            f"--attempts: {attempts} is below the run's {current} (a resume only raises the budget)"
        )
    if attempts == current:
        return None
    change = {"field": "run.attempts", "from": current, "to": attempts}
    ledger.append(
        "run_changes",
        {
            "run_id": run_id,
            "ts": time.time(),
            "field": "run.attempts",
            "value_json": json.dumps(attempts),
            "previous_json": json.dumps(current),
            "detail_json": {"pid": os.getpid(), "by": "--resume --attempts"},
        },
    )
    return change


def prepare(ledger: Ledger, run_id: str, attempts: int | None = None) -> dict[str, Any]:
    """Everything a resume does before the run goes on; returns what it found (the mark's detail)."""
    queries.resolve_run(ledger, run_id)
    check_not_running(ledger, run_id)
    orphans = stop_orphans(ledger, run_id)
    interrupted = mark_interrupted(ledger, run_id)
    changed = raise_attempts(ledger, run_id, attempts) if attempts is not None else None
    detail = {
        "pid": os.getpid(),
        "interrupted_attempts": interrupted,
        "orphaned_lives": orphans,
        "unfinished": len(queries.unfinished(ledger, run_id)),
        **({"changed": [changed]} if changed else {}),
    }
    log.info("resume %s: %s", run_id, detail)
    return detail
