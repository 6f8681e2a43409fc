"""Resume: after a crash, Ctrl-C or SIGKILL, pick a run up where the ledger says it is.

Nothing is rewritten. Attempts that started and never ended get a new ``attempt_ends`` row with
status ``interrupted``; server lives the dead run left running are stopped and get their end row
(``orphaned``); a raised attempt budget (``--attempts N``) is a ``run_changes`` row, which turns
the run's ``infra_failed`` instances back into pending ones; a ``resumed`` run mark records what
was found. Then the run goes on with every instance whose outcome is not final (the
``instance_next`` view).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from wedgewatch.errors import BadInput
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger

log = logging.getLogger(__name__)

LIVE_MARKS = ("started", "resumed")
END_MARKS = ("finished", "interrupted", "aborted")


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")[:-1] or None


def _alive_as(pid: int, argv: list[str] | None) -> bool:
    """Whether ``pid`` is alive and still the process we recorded (a pid may have been reused)."""
    cmd = _cmdline(pid)
    if cmd is None:
        return False
    if not argv:
        return any("wedgewatch" in part for part in cmd)
    return cmd == argv or (len(cmd) >= 2 and cmd[1:] == argv[1:])


def check_not_running(ledger: Ledger, run_id: str) -> None:
    """Refuse to resume a run whose own process is still alive (two writers would double up)."""
    marks = queries.run_marks(ledger, run_id)
    if not marks or marks[-1]["kind"] not in LIVE_MARKS:
        return
    detail = json.loads(marks[-1]["detail_json"] or "{}")
    pid = detail.get("pid")
    if isinstance(pid, int) and pid != os.getpid() and _alive_as(pid, None):
        raise BadInput(f"run {run_id} is still running (pid {pid}); stop it before --resume")


def stop_orphans(ledger: Ledger, run_id: str) -> list[str]:
    """Stop server lives of this run that have no end row and whose process is still alive."""
    found: list[str] = []
    for life in queries.server_lives(ledger, run_id):
        if life["ended_at"] is not None:
            continue
        pid = life["pid"]
        argv = json.loads(life["argv_json"]) if life["argv_json"] else None
        alive = isinstance(pid, int) and _alive_as(pid, argv)
        if alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # servers run in their own group, led by pid
            found.append(life["life_id"])
        ledger.append(
            "server_life_ends",
            {
                "life_id": life["life_id"],
                "ended_at": time.time(),
                "end_reason": "orphaned" if alive else "lost",
                "exit_code": None,
            },
        )
    return found


def mark_interrupted(ledger: Ledger, run_id: str) -> list[str]:
    """Give every attempt in flight its end: ``interrupted``."""
    rows = queries.in_flight(ledger, run_id)
    now = time.time()
    ledger.append_many(
        "attempt_ends",
        [
            {
                "attempt_id": r["attempt_id"],
                "ended_at": now,
                "status": "interrupted",
                "reason": "found_on_resume",
                "life_id": r["life_id"],
                "detail_json": {"resumed_by_pid": os.getpid()},
            }
            for r in rows
        ],
    )
    return [r["attempt_id"] for r in rows]


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
