"""A live page's requests in flight and just ended, kept up to date from the rows its cursor brings
each second, instead of asked of the whole ledger again (``flight.pending``).

Why: asking again is a scan of every request the scope ever had (the starts without an end, the
ends of the last minute), once a second per page. On a proxy that ends 200 requests a second that
was a quarter of a core after a few minutes, and it grows with the run (``bench proxy --view``
found it: the page's process took that CPU from the simulator and the load generator beside it).
Here a page loads the pending requests once, then each second reads only the rows that came, by
id, and forgets the ends that left the table's window, so its work follows the rows that arrive
and the requests in flight, not the ledger's size. What it holds is what ``flight.pending`` would
return at that moment (tests/test_view_panels.py compares them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from wedgewatch.analysis.panels import flight
from wedgewatch.analysis.panels.scope import Scope
from wedgewatch.base.vocab import OK
from wedgewatch.ledger.store import Ledger, Row

CHUNK = 500
"""Ids asked for in one statement."""


class Tracker:
    """``found(rows, now)``: the pending requests, given the rows new since the last call."""

    def __init__(self, ledger: Ledger, scope: Scope) -> None:
        self.ledger, self.scope = ledger, scope
        self._starts: dict[str, dict[str, Any]] | None = None
        self._ends: dict[str, dict[str, Any]] = {}

    def found(self, rows: Mapping[str, list[Row]], now: float) -> flight.Pending:
        if self._starts is None:  # the first look: everything as it is now
            first = flight.pending(self.ledger, self.scope, now)
            self._starts = {str(r["request_id"]): dict(r) for r in first.starts}
            self._ends = {str(r["request_id"]): dict(r) for r in first.ends}
        else:
            self._advance(self._starts, rows)
        self._forget(now)
        starts = list(self._starts.values())
        return flight.Pending(starts, list(self._ends.values()), flight.doomed_lives(self.ledger, starts))

    def _advance(self, starts: dict[str, dict[str, Any]], rows: Mapping[str, list[Row]]) -> None:
        ended = [str(r["request_id"]) for r in rows.get("requests", [])]
        for r in self._fetch(f"SELECT {flight.END_COLS} FROM requests q", "q", ended):
            self._ends[str(r["request_id"])] = dict(r)
        for rid in ended:
            starts.pop(rid, None)
        # A start can come a look after its own end (the two tables are read one after the
        # other): only those still without an end are in flight.
        new = [str(r["request_id"]) for r in rows.get("request_starts", [])]
        new = [rid for rid in new if rid not in self._ends]
        no_end = "AND NOT EXISTS (SELECT 1 FROM requests q WHERE q.request_id = s.request_id)"
        for r in self._fetch(f"SELECT {flight.START_COLS} FROM request_starts s", "s", new, no_end):
            starts[str(r["request_id"])] = dict(r)

    def _fetch(self, select: str, alias: str, ids: Iterable[str], extra: str = "") -> list[Row]:
        mine, params = self.scope.requests_sql(alias)
        todo = sorted(set(ids))
        out: list[Row] = []
        for i in range(0, len(todo), CHUNK):
            chunk = todo[i : i + CHUNK]
            marks = ", ".join("?" * len(chunk))
            out += self.ledger.query(
                f"{select} WHERE {alias}.request_id IN ({marks}) AND {mine} {extra}", (*chunk, *params)
            )
        return out

    def _forget(self, now: float) -> None:
        """Keep what ``flight.pending`` would return: the bad or resumed ends of the last
        ``LINGER`` seconds, the latest good ones of the last ``LINGER_OK``, and the legs the kept
        resumed ones went on to."""

        def end(r: Mapping[str, Any]) -> float:
            return float(r["started_at"]) + float(r["duration"] or 0.0)

        bad = {k for k, r in self._ends.items() if r["outcome"] != OK and end(r) >= now - flight.LINGER}
        good = sorted(
            (k for k, r in self._ends.items() if r["outcome"] == OK and end(r) >= now - flight.LINGER_OK),
            key=lambda k: end(self._ends[k]),
            reverse=True,
        )[: flight.OK_AT_MOST]
        keep = bad | set(good)
        follow = [self._ends[k] for k in keep]
        while follow:
            nxt = {str(flight.detail(r["detail_json"]).get("resumed_as") or "") for r in follow}
            nxt = {k for k in nxt if k in self._ends and k not in keep}
            keep |= nxt
            follow = [self._ends[k] for k in nxt]
        self._ends = {k: r for k, r in self._ends.items() if k in keep}
