"""What ``wrap`` says on stderr while the harness runs, besides the harness's own output: one line
when a server life that replaces another is ready (which life, why the old one went, how long the
harness waited), and one line at the end (requests, stalls, resumed, restarts, from the ledger).

stderr, as wrap's other lines: a harness's stdout (its results, if it prints them) stays its own.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from wedgewatch.analysis import wrapped
from wedgewatch.base.events import Event, Promoted, Restarting, ServerReady, ServerStarting
from wedgewatch.base.vocab import FIRST_LIFE, SPARE
from wedgewatch.ledger import Ledger

log = logging.getLogger(__name__)

PREFIX = "wedgewatch wrap:"


class LifeLines:
    """A bus subscriber: numbers the lives of each server as they start, and prints a line when a
    life that replaces another is ready. The first life needs none: wrap's start line says the
    server is up."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out
        self.started: dict[str | None, int] = {}  # member -> lives started
        self.number: dict[str, int] = {}  # life_id -> its number among its member's lives
        self.reason: dict[str, str] = {}  # life_id -> why it started
        # member -> (when the restart began, why, the number of the life it replaced): the first
        # one of a chain (a restart whose first new life failed to start is still one wait).
        self.pending: dict[str | None, tuple[float, str, int | None]] = {}

    def on_event(self, ev: Event) -> None:
        if isinstance(ev, Restarting):
            self.pending.setdefault(ev.member, (ev.ts, ev.reason, self.number.get(ev.life_id)))
        elif isinstance(ev, ServerStarting):
            n = self.started[ev.member] = self.started.get(ev.member, 0) + 1
            self.number[ev.life_id] = n
            self.reason[ev.life_id] = ev.reason
        elif isinstance(ev, ServerReady):
            if self.reason.get(ev.life_id) == SPARE:
                return  # a spare: said when it is promoted
            began = self.pending.pop(ev.member, None)
            if began is None and self.reason.get(ev.life_id) in (None, *FIRST_LIFE):
                return
            print(f"{PREFIX} {self.ready_line(ev, began)}", file=self.out or sys.stderr, flush=True)
        elif isinstance(ev, Promoted):
            began = self.pending.pop(ev.member, None)
            print(f"{PREFIX} {self.promoted_line(ev, began)}", file=self.out or sys.stderr, flush=True)

    def promoted_line(self, ev: Promoted, began: tuple[float, str, int | None] | None) -> str:
        who = f"server {ev.member} life" if ev.member is not None else "server life"
        old = self.number.get(ev.replaced or "")
        replaced = f"life {old}" if old is not None else "the last life"
        head = f"{who} {self.number.get(ev.life_id, '?')} ({ev.life_id}), a spare ready {ev.idle:.1f} s,"
        waited = f": {ev.ts - began[0]:.1f} s from the restart" if began is not None else ""
        return f"{head} serves in place of {replaced} after a {ev.reason}{waited}"

    def ready_line(self, ev: ServerReady, began: tuple[float, str, int | None] | None) -> str:
        who = f"server {ev.member} life" if ev.member is not None else "server life"
        head = f"{who} {self.number.get(ev.life_id, '?')} ready ({ev.life_id})"
        starting = f"{ev.ready_seconds:.1f} s starting and warming up"
        if began is None:  # a life after a failed first start: no restart began it
            return f"{head} after {self.reason.get(ev.life_id)}: {starting}"
        ts, why, old = began
        replaced = f"life {old}" if old is not None else "the last life"
        return f"{head}, replacing {replaced} after a {why}: {ev.ts - ts:.1f} s from the restart ({starting})"


def end_line(ledger: Ledger, harness_run_id: str) -> str | None:
    """The harness run's last line, from the ledger's rows; None (and a logged warning) if the
    ledger cannot be read: wrap's exit code is the harness's, whatever this line does."""
    try:
        return f"{PREFIX} harness run {harness_run_id}: {wrapped.end_line(wrapped.summarise(ledger, harness_run_id))}"
    except Exception:
        log.warning("could not read the summary of harness run %s", harness_run_id, exc_info=True)
        return None
