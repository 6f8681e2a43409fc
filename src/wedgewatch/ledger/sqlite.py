"""The SQLite ledger: one file in WAL mode, append-only (the embedded default, stdlib only).

Only INSERT is ever issued; there is no UPDATE or DELETE anywhere in wedgewatch. Writers from
several threads (the proxy in the event loop, agents in worker threads) share one connection
behind a lock: SQLite serialises writers anyway, and one connection keeps WAL checkpoints simple.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from wedgewatch.base.errors import BadInput, LedgerConflict
from wedgewatch.base.files import create_private
from wedgewatch.ledger.schema import ADDED_COLUMNS, SCHEMA_VERSION, TABLES, VIEWS
from wedgewatch.ledger.store import Ledger, Row, check_columns, check_read_only, encode, insert_sql

log = logging.getLogger(__name__)


class SqliteLedger(Ledger):
    """Open (creating if needed) a ledger file. ``":memory:"`` works for unit tests.

    ``read_only``: a reader's open (``report``, ``lives``, ``ledger check``, ...). The file must be
    a wedgewatch ledger already (anything else, an empty file included, is refused and left as it
    was), and one of the current schema is read through a read-only connection, so a reader never
    writes, whoever else is writing. An older ledger is first brought up to date, additively."""

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        current = self._probe() if read_only and self.path != ":memory:" else None
        try:
            if current == SCHEMA_VERSION:
                uri = f"file:{quote(str(Path(self.path).resolve()))}?mode=ro"
                self._conn = sqlite3.connect(
                    uri, uri=True, check_same_thread=False, isolation_level=None, timeout=30
                )
            else:
                if self.path != ":memory:":
                    create_private(self.path)  # 0600, and its -wal and -shm copy the mode; dirs 0700
                self._conn = sqlite3.connect(
                    self.path, check_same_thread=False, isolation_level=None, timeout=30
                )
                self._conn.execute("PRAGMA journal_mode=WAL")  # the first touch of the file
        except (OSError, sqlite3.DatabaseError) as exc:
            # A path that cannot be written (a read-only or missing directory), or a file that is
            # no SQLite database: the user's input.
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise BadInput(f"{self.path}: cannot open the ledger: {reason}") from None
        self._conn.row_factory = sqlite3.Row
        # NORMAL in WAL mode is durable against a process crash (SIGKILL), which is what resume needs.
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA foreign_keys=OFF")
        if current != SCHEMA_VERSION:
            self._migrate()
        self._columns: dict[str, list[str]] = {}

    def _probe(self) -> int:
        """The schema version of an existing wedgewatch ledger, read without writing a byte;
        BadInput for a missing file, one that is not SQLite, or SQLite without a ledger's tables."""
        if not Path(self.path).is_file():
            raise BadInput(f"{self.path}: no such ledger file")
        uri = f"file:{quote(str(Path(self.path).resolve()))}?mode=ro"
        try:
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
                names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if not {"meta", "schema_migrations", "runs"} <= names:
                    what = "an empty file" if not names else "a SQLite file without a ledger's tables"
                    raise BadInput(
                        f"{self.path}: not a wedgewatch ledger ({what}); nothing was written to it"
                    )
                row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        except sqlite3.DatabaseError as exc:
            raise BadInput(
                f"{self.path}: not a wedgewatch ledger ({exc}); nothing was written to it"
            ) from None
        version = int(row[0]) if row is not None and row[0] is not None else 1
        if version > SCHEMA_VERSION:
            raise BadInput(
                f"{self.path}: ledger schema {version} is newer than this wedgewatch's "
                f"({SCHEMA_VERSION}); upgrade wedgewatch to read it"
            )
        return version

    def _migrate(self) -> None:
        """Create what is missing and bring an older file up to SCHEMA_VERSION, additively:
        new tables, new columns (ALTER TABLE ADD COLUMN), and the views, which are derived and
        so are the one thing that is dropped and re-created (in one transaction, so another
        process reading the ledger never sees them missing)."""
        import time

        from wedgewatch import __version__

        with self._lock:
            self._conn.executescript(TABLES)
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                current = self._stored_version()
                if current > SCHEMA_VERSION:
                    raise BadInput(
                        f"{self.path}: ledger schema {current} is newer than this wedgewatch's "
                        f"({SCHEMA_VERSION}); upgrade wedgewatch to read it"
                    )
                for version in range(2, SCHEMA_VERSION + 1):
                    for table, column, kind in ADDED_COLUMNS.get(version, []):
                        have = {r[1] for r in self._conn.execute(f"PRAGMA table_info({table})")}
                        if column not in have:
                            self._conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                if current == 0:
                    # The version the file was created with; the current one is in schema_migrations.
                    self._conn.execute(
                        "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
                if current < SCHEMA_VERSION:
                    self._conn.execute(
                        "INSERT OR IGNORE INTO schema_migrations(version, applied_at, tool_version) "
                        "VALUES (?, ?, ?)",
                        (SCHEMA_VERSION, time.time(), __version__),
                    )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.executescript("BEGIN IMMEDIATE;\n" + VIEWS + "\nCOMMIT;")

    def _stored_version(self) -> int:
        """0 for a new file; version 1 files have only the meta row."""
        row = self._conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        if row is not None and row[0] is not None:
            return int(row[0])
        row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return int(row[0]) if row is not None else 0

    def schema_version(self) -> int:
        """The schema version of this file (after opening, always SCHEMA_VERSION)."""
        with self._lock:
            return self._stored_version()

    def columns(self, table: str) -> list[str]:
        with self._lock:
            return list(self._table_columns(table))

    def tables(self) -> list[str]:
        with self._lock:
            rows = self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return sorted(r[0] for r in rows if not r[0].startswith("sqlite_"))

    def integrity(self) -> str:
        with self._lock:
            return str(self._conn.execute("PRAGMA integrity_check").fetchone()[0])

    def now(self) -> float:
        # The expression of runner_beats.ts's default (schema_runners.py): one clock for both.
        return float(self.query("SELECT (julianday('now') - 2440587.5) * 86400.0")[0][0])

    def _table_columns(self, table: str) -> list[str]:
        cols = self._columns.get(table)
        if cols is None:
            cols = [r[1] for r in self._conn.execute(f"PRAGMA table_info({table})")]
            if not cols:
                raise KeyError(f"no ledger table {table!r}")
            self._columns[table] = cols
        return cols

    def append_all(self, batches: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]) -> int:
        with self._lock:
            work = []
            for table, rows in batches:
                if not rows:
                    continue
                names = list(rows[0].keys())
                check_columns(table, names, self._table_columns(table))
                values = [tuple(encode(r.get(n)) for n in names) for r in rows]
                work.append((table, insert_sql(table, names, "?"), values))
            if not work:
                return 0
            cur = self._conn.cursor()
            cur.execute("BEGIN")
            try:
                for _, sql, values in work:
                    cur.executemany(sql, values)
                cur.execute("COMMIT")
            except sqlite3.IntegrityError as exc:
                self._rollback(cur)
                if "UNIQUE" in str(exc) or "PRIMARY KEY" in str(exc):
                    raise LedgerConflict(f"{self.path}: {exc}") from None
                raise
            except BaseException:
                self._rollback(cur)
                raise
            return cur.lastrowid or 0

    def _rollback(self, cur: sqlite3.Cursor) -> None:
        """Roll back a failed append, unless SQLite already did: after a full disk or an I/O
        error it ends the transaction itself, and a ROLLBACK then raises ("no transaction is
        active") in place of the error that matters (seen by ``bench chaos``)."""
        if self._conn.in_transaction:
            cur.execute("ROLLBACK")

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Row]:
        """Read-only query. Writes go through ``append``."""
        check_read_only(sql)
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
