"""Where a page's live updates stand in the ledger: a position per table, monotonic, carried in the
page's URL (htmx's SSE extension, when it opens a new connection, sends no ``Last-Event-ID``) and
as each batch's SSE ``id`` (the browser's own reconnection sends that one).

The ledger is append-only, so "what is new" is "what lies past the position". What a position is
depends on the backend:

- **SQLite**: the table's ``rowid``. Writers are serialised (one write transaction at a time, even
  across processes), and a row's rowid is given inside its transaction, so rowids become visible
  in their order: a reader that saw rowid N has seen every row below it. Each read is one short
  statement in autocommit mode: a read transaction held open across the wait between two looks
  would keep WAL checkpoints from ever reaching the end of the log, and the -wal file would grow
  for as long as a page is open.
- **PostgreSQL**: serial ids are no order there, since several writers commit out of order (id 11
  can be visible before id 10, which may still commit). The position is a transaction-id horizon
  instead: ``pg_snapshot_xmin(pg_current_snapshot())``, below which every transaction has ended.
  A look returns the rows whose inserting transaction (the system column ``xmin``) lies between
  the last horizon and the new one; rows of transactions still open at the horizon wait for the
  next look. ``xmin`` is 32 bits and the horizon 64: a row's transaction is placed by its distance
  from the horizon modulo 2^32 (PostgreSQL keeps every live transaction within 2^31 of it).

A position too old or malformed is no error: the page is rendered afresh and the feed starts from
the ledger as it is then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wedgewatch.ledger.store import Ledger, Row
from wedgewatch.ledger.target import backend_of

# What the view follows, and the columns it needs of each new row (to know which panels changed).
# The engine's samples are not followed row by row: the lanes' strips are redrawn on a timer.
TABLES: dict[str, str] = {
    "runs": "run_id",
    "harness_runs": "harness_run_id",
    "harness_run_ends": "harness_run_id",
    "run_marks": "run_id",
    "attempts": "attempt_id, instance_id, run_id",
    "attempt_ends": "attempt_id",
    "evaluations": "attempt_id",
    "server_lives": "life_id, run_id",
    "server_life_ready": "life_id",
    "server_life_ends": "life_id",
    "events": "life_id, run_id, kind",
    "request_starts": "request_id, life_id",
    "requests": "request_id, life_id",
}
_SPAN = 1 << 32
_HALF = 1 << 31


@dataclass(frozen=True)
class Cursor:
    positions: tuple[int, ...]  # one per table of TABLES, in its order

    def encode(self) -> str:
        return "-".join(format(p, "x") for p in self.positions)

    @classmethod
    def decode(cls, text: str | None) -> Cursor | None:
        """The cursor a URL or an SSE id carried, or None when it is not one."""
        if not text:
            return None
        parts = text.strip().split("-")
        if len(parts) != len(TABLES):
            return None
        try:
            values = tuple(int(p, 16) for p in parts)
        except ValueError:
            return None
        return cls(values) if all(v >= 0 for v in values) else None


class Follower:
    """Reads what is new in the ledger since a cursor, one short statement per table."""

    def __init__(self, ledger: Ledger, target: str) -> None:
        self.ledger = ledger
        self.pg = backend_of(target) == "postgresql"

    def now(self) -> Cursor:
        """The position of every table now: what a page rendered after this has seen."""
        return Cursor(tuple(self._top(t) for t in TABLES))

    def since(self, cursor: Cursor) -> tuple[Cursor, dict[str, list[Row]]]:
        """The new rows of each table (only those that have some) and the cursor past them."""
        out: dict[str, list[Row]] = {}
        positions = []
        for (table, cols), prev in zip(TABLES.items(), cursor.positions, strict=True):
            top = self._top(table)
            if top < prev:  # never backwards (a stale cursor of another ledger, a restored file)
                positions.append(prev)
                continue
            if top > prev:
                rows = self._rows(table, cols, prev, top)
                if rows:
                    out[table] = rows
            positions.append(top)
        return Cursor(tuple(positions)), out

    def _top(self, table: str) -> int:
        if self.pg:
            return int(
                self.ledger.query("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")[0][0]
            )
        value = self.ledger.query(f"SELECT MAX(rowid) FROM {table}")[0][0]
        return int(value or 0)

    def _rows(self, table: str, cols: str, prev: int, top: int) -> list[Row]:
        if not self.pg:
            return self.ledger.query(
                f"SELECT {cols} FROM {table} WHERE rowid > ? AND rowid <= ?", (prev, top)
            )
        # The distance of the row's transaction past the horizon's low 32 bits, modulo 2^32:
        # at least 2^31 means before the horizon; and it must be at or past the last horizon.
        least = max(_HALF, prev - top + _SPAN)
        return self.ledger.query(
            f"SELECT {cols} FROM {table} "
            "WHERE ((xmin::text::bigint - ?) % 4294967296 + 4294967296) % 4294967296 >= ?",
            (top % _SPAN, least),
        )


def touched(rows: Mapping[str, list[Row]]) -> dict[str, set[Any]]:
    """What the new rows touch: attempt ids, instance ids, life ids, run ids, request ids."""
    out: dict[str, set[Any]] = {
        "attempts": set(),
        "instances": set(),
        "lives": set(),
        "runs": set(),
        "requests": set(),
    }
    for table, found in rows.items():
        for r in found:
            keys = r.keys()
            if "attempt_id" in keys and r["attempt_id"]:
                out["attempts"].add(r["attempt_id"])
            if "instance_id" in keys:
                out["instances"].add(r["instance_id"])
            if "life_id" in keys and r["life_id"]:
                out["lives"].add(r["life_id"])
            if "run_id" in keys and r["run_id"]:
                out["runs"].add(r["run_id"])
            if table in ("request_starts", "requests"):
                out["requests"].add(r["request_id"])
            if table in ("harness_runs", "harness_run_ends"):
                out["runs"].add(r["harness_run_id"])
    return out
