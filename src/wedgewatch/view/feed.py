"""One page's live updates: once a second, what the ledger gained since the page's cursor, turned
into the fragments of the panels it changed (each replaces its element by id: htmx's out-of-band
swap), in one batch. Rows are batched per second, so the bytes sent depend on what changed, not on
how fast rows arrive: with 256 streams in flight the table of requests is the bulk of it
(``wedgewatch bench view`` measures it).

What each change redraws: a new attempt, attempt end or verdict redraws the header, the causes and
that instance's row (the whole attempts table under a filter, since a row may now match it); a
life's start, readiness or end, or an event, redraws the lanes, which are redrawn every
``STRIP_EVERY`` seconds anyway while the run lives (the engine strip); the requests' table is
redrawn every second while it has rows, and once more when it empties, from the page's
``Tracker`` (``tracker.py``: the requests it holds, advanced by the rows that came, never the whole
ledger asked again); rows of requests alone redraw the header at most every
``REQUESTS_HEADER_EVERY`` seconds (its counts are a scan of the scope's requests).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from wedgewatch.analysis.panels.chains import Filters
from wedgewatch.analysis.panels.scope import RUN, Scope
from wedgewatch.base.vocab import PROXY_STARTED
from wedgewatch.ledger.store import Ledger
from wedgewatch.view import pages
from wedgewatch.view.cursor import Cursor, Follower, touched
from wedgewatch.view.progress import Progress, proxies
from wedgewatch.view.tracker import Tracker

EVERY = 1.0
"""Seconds between two batches."""
STRIP_EVERY = 5.0
"""Seconds between two redraws of a live scope's lanes (their engine strips) with nothing new."""
HEADER_EVERY = 5.0
"""Seconds between two redraws of a live header with nothing new (its elapsed time)."""
REQUESTS_HEADER_EVERY = 2.0
"""Seconds between two redraws of the header when only requests came."""

_LANE_TABLES = {"server_lives", "server_life_ready", "server_life_ends", "events"}
_ATTEMPT_TABLES = {"attempts", "attempt_ends", "evaluations", "run_marks"}
_REQUEST_TABLES = {"request_starts", "requests"}


@dataclass
class Live:
    """The state of one page's live connection."""

    ledger: Ledger
    follower: Follower
    progress: Progress
    scope: Scope | None  # None: the index of every scope
    filters: Filters
    cursor: Cursor
    _urls: list[str] | None = None
    _flight_rows: int = -1
    _live: bool = True
    _last: dict[str, float] = field(default_factory=dict)
    _tracker: Tracker | None = None

    async def step(self) -> str:
        """The fragments of this second's batch ("" when nothing changed)."""
        cursor, rows = await asyncio.to_thread(self.follower.since, self.cursor)
        self.cursor = cursor
        if self.scope is None:
            return await self._index(bool(rows))
        return await self._scope(self.scope, rows)

    def _since(self, what: str) -> float:
        return time.monotonic() - self._last.get(what, 0.0)

    def _due(self, what: str, every: float, changed: bool) -> bool:
        now = time.monotonic()
        if changed or (self._live and now - self._last.get(what, 0.0) >= every):
            self._last[what] = now
            return True
        return False

    async def _index(self, changed: bool) -> str:
        if not self._due("index", STRIP_EVERY, changed):
            return ""
        html, self._live = await asyncio.to_thread(pages.index_parts, self.ledger, True)
        return html

    async def _scope(self, scope: Scope, rows: dict[str, list]) -> str:  # type: ignore[type-arg]
        tables = set(rows)
        parts: list[str] = []
        # Requests alone (a busy proxy's every second) redraw the header at most every
        # REQUESTS_HEADER_EVERY seconds: its counts are a scan of the scope's requests.
        by_requests = bool(tables & _REQUEST_TABLES) and self._since("header") >= REQUESTS_HEADER_EVERY
        if self._due("header", HEADER_EVERY, bool(tables - _REQUEST_TABLES) or by_requests):
            html, live = await asyncio.to_thread(self._header, scope)
            self._live = live
            parts.append(html)
        if self._due("lanes", STRIP_EVERY, bool(tables & _LANE_TABLES)):
            parts.append(await asyncio.to_thread(pages.lanes_html, self.ledger, scope, self._live))
        if self._urls is None or any(r["kind"] == PROXY_STARTED for r in rows.get("events", [])):
            self._urls = await asyncio.to_thread(proxies, self.ledger, scope)
        if self._flight_rows != 0 or tables & _REQUEST_TABLES:
            snap = await self.progress.snapshot(self._urls)
            if self._flight_rows != 0 or snap.rows or tables & _REQUEST_TABLES:
                if self._tracker is None:
                    self._tracker = Tracker(self.ledger, scope)
                html, n = await asyncio.to_thread(
                    pages.flight_html, self.ledger, scope, snap, self._tracker, rows
                )
                if n or self._flight_rows != 0:
                    parts.append(html)
                self._flight_rows = n
        if scope.kind == RUN and tables & _ATTEMPT_TABLES:
            parts.append(await asyncio.to_thread(pages.causes_html, self.ledger, scope))
            if self.filters:
                parts.append(await asyncio.to_thread(pages.instances_html, self.ledger, scope, self.filters))
            else:
                ids = await asyncio.to_thread(_instances, self.ledger, rows)
                if ids:
                    parts.append(await asyncio.to_thread(pages.instance_rows_html, self.ledger, scope, ids))
        return "".join(parts)

    def _header(self, scope: Scope) -> tuple[str, bool]:
        h = pages.header_ctx(self.ledger, scope, time.time())
        from wedgewatch.analysis.panels.render import environment

        panels = environment().get_template("panels.html.j2").module
        return str(panels.header(h, oob=True)), bool(h["live"])  # type: ignore[attr-defined]


def _instances(ledger: Ledger, rows: dict[str, list]) -> set[str]:  # type: ignore[type-arg]
    """The instances whose attempts the new rows touch."""
    t = touched({k: v for k, v in rows.items() if k in _ATTEMPT_TABLES})
    ids = set(t["instances"])
    known = {r["attempt_id"] for r in rows.get("attempts", [])}
    rest = sorted(t["attempts"] - known)
    for i in range(0, len(rest), 500):
        chunk = rest[i : i + 500]
        marks = ", ".join("?" * len(chunk))
        ids |= {
            str(r[0])
            for r in ledger.query(
                f"SELECT instance_id FROM attempts WHERE attempt_id IN ({marks})", tuple(chunk)
            )
        }
    return ids
