"""Server lives a dead runner left behind: stopped where its pids are visible from here, and
given their end row either way (a resume, and the run's other runners, call this)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

from wedgewatch.base.errors import LedgerConflict
from wedgewatch.base.vocab import ELSEWHERE, LOST, ORPHANED
from wedgewatch.ledger.store import Ledger, Row

# A life's end reason here: ORPHANED (alive, stopped from here), LOST (already gone), ELSEWHERE (on
# another host, or pid namespace: its pid means nothing here).


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")[:-1] or None


def alive_as(pid: int, argv: list[str] | None) -> bool:
    """Whether ``pid`` is alive and still the process we recorded (a pid may have been reused)."""
    cmd = _cmdline(pid)
    if cmd is None:
        return False
    if not argv:
        return any("wedgewatch" in part for part in cmd)
    return cmd == argv or (len(cmd) >= 2 and cmd[1:] == argv[1:])


def end_life(ledger: Ledger, life: Row, here: bool) -> str | None:
    """Stop the life's server when it runs here (its own process group) and write its end;
    returns the end reason, or None when the life already had its end (someone else wrote it)."""
    pid = life["pid"]
    argv = json.loads(life["argv_json"]) if life["argv_json"] else None
    alive = here and isinstance(pid, int) and alive_as(pid, argv)
    if alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # servers run in their own group, led by pid
    reason = ORPHANED if alive else LOST if here else ELSEWHERE
    try:
        ledger.append(
            "server_life_ends",
            {"life_id": life["life_id"], "ended_at": time.time(), "end_reason": reason, "exit_code": None},
        )
    except LedgerConflict:
        return None
    return reason
