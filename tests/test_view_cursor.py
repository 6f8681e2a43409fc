"""The view's cursor (src/wedgewatch/view/cursor.py): what is new since a position, never a row
missed, never backwards, on both backends. SQLite: a page that follows the ledger holds no read
transaction between its looks, so the writer's WAL checkpoint reaches the end of the log.
PostgreSQL (a real server, tests/pg_server.py): rows of two writers whose transactions commit out
of order (the later id first) are all delivered, the earlier one once its transaction ends."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ledger_helpers import add_attempt, make_run
from wedgewatch.ledger import Ledger
from wedgewatch.view.cursor import TABLES, Cursor, Follower, touched


def _event(ledger: Ledger, kind: str) -> None:
    ledger.append("events", {"ts": time.time(), "kind": kind, "detail_json": {}})


def test_the_cursor_travels_in_a_url_and_refuses_what_is_not_one() -> None:
    c = Cursor(tuple(range(len(TABLES))))
    assert Cursor.decode(c.encode()) == c
    for bad in (None, "", "zz", "1-2", "-".join(["x"] * len(TABLES)), c.encode() + "-1"):
        assert Cursor.decode(bad) is None


def test_sqlite_new_rows_once_each_and_the_wal_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    writer = Ledger(path)
    make_run(writer, "r", ["a", "b"])
    reader = Ledger(path, read_only=True)
    follow = Follower(reader, str(path))
    start = follow.now()
    cursor, rows = follow.since(start)
    assert rows == {}  # nothing since the page was rendered
    add_attempt(writer, "r", "a", 1, "api_error", "stall_ttft")
    _event(writer, "some_new_kind")
    cursor, rows = follow.since(cursor)
    assert sorted(rows) == ["attempt_ends", "attempts", "events"]
    assert [r["instance_id"] for r in rows["attempts"]] == ["a"]
    assert touched(rows)["instances"] == {"a"} and touched(rows)["attempts"] == {"r-a-1"}
    again, rows = follow.since(cursor)
    assert rows == {} and again == cursor  # once each
    assert all(n >= p for n, p in zip(cursor.positions, start.positions, strict=True))
    # The reader's looks leave no transaction open: the writer checkpoints the whole log.
    add_attempt(writer, "r", "b", 1, "submitted", patch="x")
    follow.since(cursor)
    busy, logged, done = writer.query("PRAGMA wal_checkpoint(TRUNCATE)")[0]
    assert busy == 0 and logged == done
    # A cursor from ahead of the ledger (another file) never moves it backwards.
    ahead = Cursor(tuple(p + 100 for p in cursor.positions))
    assert follow.since(ahead)[0] == ahead
    reader.close()
    writer.close()


def test_postgres_rows_committed_out_of_order_are_all_delivered(pg_url: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    ledger = Ledger(pg_url)
    follow = Follower(ledger, pg_url)
    cursor = follow.now()
    first = psycopg.connect(pg_url.replace("postgresql://", "postgresql://", 1))
    second = psycopg.connect(pg_url)
    try:
        sql = "INSERT INTO events (ts, kind) VALUES (%s, %s) RETURNING id"
        early_id = first.execute(sql, (time.time(), "early")).fetchone()[0]  # open, not committed
        late_id = second.execute(sql, (time.time(), "late")).fetchone()[0]
        second.commit()
        assert late_id > early_id
        # An id cursor would now take "late" and move past "early" for good.
        visible = [r["kind"] for r in ledger.query("SELECT kind FROM events WHERE id > 0")]
        assert visible == ["late"]
        cursor, rows = follow.since(cursor)
        assert "events" not in rows  # held back while an older transaction is open
        first.commit()
        cursor, rows = follow.since(cursor)
        assert sorted(r["kind"] for r in rows["events"]) == ["early", "late"]
        assert follow.since(cursor)[1] == {}
    finally:
        first.close()
        second.close()
        ledger.close()
