"""The ledger on PostgreSQL: SQLAlchemy Core over psycopg 3, a connection pool shared by the
threads that write (the proxy's event loop, agent threads), so writers do not queue on one lock.

On open, ``alembic upgrade head`` brings the database to the current schema (migrations in
``pg/migrations``), and the views are re-created when they differ from this wedgewatch's; both
under an advisory lock, so runners opening one database at once do it once, in turn.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import BadInput, LedgerConflict
from wedgewatch.ledger.pg.migrations import HEAD
from wedgewatch.ledger.pg.sql import PgRow, adapt, port_views
from wedgewatch.ledger.schema import SCHEMA_VERSION, VIEWS
from wedgewatch.ledger.store import Ledger, Row, check_columns, check_read_only, encode, insert_sql
from wedgewatch.ledger.target import describe, sqlalchemy_url

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"
# pg_advisory_xact_lock's key for "this database's ledger schema is being brought up to date".
SCHEMA_LOCK = 0x7765_6467  # "wedg"
IDLE_IN_TRANSACTION = "60s"


def _import_sqlalchemy() -> Any:
    try:
        import sqlalchemy
    except ImportError:
        raise BadInput(
            "a postgresql:// ledger needs the postgres extra: pip install 'wedgewatch[postgres]'"
        ) from None
    return sqlalchemy


def view_statements() -> tuple[list[str], list[str]]:
    """The views' names (in the order they are created) and their CREATE statements, ported."""
    names: list[str] = []
    creates: list[str] = []
    for chunk in port_views(VIEWS).split("CREATE VIEW ")[1:]:
        body = chunk.split("\nDROP VIEW", 1)[0].split("\n-- ", 1)[0].strip().rstrip(";")
        names.append(body.split(None, 1)[0])
        creates.append("CREATE VIEW " + body)
    return names, creates


def _encode_pg(value: Any) -> Any:
    if isinstance(value, bool):  # SQLite stores True as 1; a BIGINT column wants the same
        return int(value)
    return encode(value)


def _session_settings(conn: Any, _record: Any) -> None:
    # A runner stopped in the middle of a write (SIGSTOP, a hung host) must not hold its row
    # locks for ever: the run's other runners, ending its attempts, would wait on them. The server
    # ends such a transaction after a minute. (Committed: SET is undone by a rollback.)
    with conn.cursor() as cur:
        cur.execute(f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION}'")
    conn.commit()


class PgLedger(Ledger):
    """A ledger in a PostgreSQL database, named by its URL."""

    shared = True

    def __init__(self, target: str | Path, read_only: bool = False) -> None:
        sa = _import_sqlalchemy()
        self.url = str(target)
        self.path = describe(self.url)
        try:
            self._engine = sa.create_engine(
                sqlalchemy_url(self.url), pool_pre_ping=True, pool_size=8, max_overflow=16
            )
        except (sa.exc.ArgumentError, ValueError) as exc:
            raise BadInput(f"ledger {self.path}: not a PostgreSQL URL ({exc})") from None
        sa.event.listen(self._engine, "connect", _session_settings)
        self._columns: dict[str, list[str]] = {}
        try:
            if read_only:
                self._refuse_foreign()
            self._migrate()
        except sa.exc.OperationalError as exc:
            self._engine.dispose()
            first = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise BadInput(f"ledger {self.path}: cannot open: {first}") from None
        except BaseException:
            self._engine.dispose()
            raise

    def _refuse_foreign(self) -> None:
        """A reader's open of a database that holds no wedgewatch ledger writes nothing into it."""
        with self._engine.connect() as conn:
            found = conn.exec_driver_sql("SELECT to_regclass('schema_migrations')").scalar()
        if found is None:
            self._engine.dispose()
            raise BadInput(f"ledger {self.path}: not a wedgewatch ledger; nothing was written to it")

    def _migrate(self) -> None:
        sa = _import_sqlalchemy()
        names, creates = view_statements()
        stamp = hashlib.sha256(f"{HEAD}\n{''.join(creates)}".encode()).hexdigest()[:16]
        with self._engine.begin() as conn:
            if self._up_to_date(conn, stamp):
                return  # the common case, without the advisory lock or Alembic's import
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": SCHEMA_LOCK})
            current = self._stored_version(conn)
            if current > SCHEMA_VERSION:
                raise BadInput(
                    f"{self.path}: ledger schema {current} is newer than this wedgewatch's "
                    f"({SCHEMA_VERSION}); upgrade wedgewatch to read it"
                )
            self._upgrade(conn, current)
            have = conn.exec_driver_sql(
                "SELECT obj_description(to_regclass('instance_next'), 'pg_class')"
            ).scalar()
            if have != stamp:
                # Derived, so the one thing dropped and re-created (in this transaction: other
                # sessions never see them missing).
                conn.exec_driver_sql(f"DROP VIEW IF EXISTS {', '.join(names)} CASCADE")
                for create in creates:
                    conn.exec_driver_sql(create.replace("%", "%%"))
                conn.exec_driver_sql(f"COMMENT ON VIEW instance_next IS '{stamp}'")

    @staticmethod
    def _up_to_date(conn: Any, stamp: str) -> bool:
        if conn.exec_driver_sql("SELECT to_regclass('alembic_version')").scalar() is None:
            return False
        revision = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
        views = conn.exec_driver_sql("SELECT obj_description(to_regclass('instance_next'), 'pg_class')")
        return bool(revision == HEAD and views.scalar() == stamp)

    @staticmethod
    def _upgrade(conn: Any, current: int) -> None:
        """``alembic upgrade head`` on ``conn``, and the rows that say which version this is."""
        from alembic import command
        from alembic.config import Config

        from wedgewatch import __version__

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        if current == 0:
            conn.exec_driver_sql(
                "INSERT INTO meta(key, value) VALUES ('schema_version', %s) ON CONFLICT DO NOTHING",
                (str(SCHEMA_VERSION),),
            )
        if current < SCHEMA_VERSION:
            conn.exec_driver_sql(
                "INSERT INTO schema_migrations(version, applied_at, tool_version) "
                "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (SCHEMA_VERSION, time.time(), __version__),
            )

    @staticmethod
    def _stored_version(conn: Any) -> int:
        if conn.exec_driver_sql("SELECT to_regclass('schema_migrations')").scalar() is None:
            return 0
        v = conn.exec_driver_sql("SELECT MAX(version) FROM schema_migrations").scalar()
        return int(v) if v is not None else 0

    def schema_version(self) -> int:
        with self._engine.connect() as conn:
            return self._stored_version(conn)

    def columns(self, table: str) -> list[str]:
        cols = self._columns.get(table)
        if cols is None:
            rows = self.query(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                "current_schema() AND table_name = ? ORDER BY ordinal_position",
                (table,),
            )
            cols = [r[0] for r in rows]
            if not cols:
                raise KeyError(f"no ledger table {table!r}")
            self._columns[table] = cols
        return list(cols)

    def tables(self) -> list[str]:
        rows = self.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_type = 'BASE TABLE' AND table_name != 'alembic_version'"
        )
        return sorted(r[0] for r in rows)

    def integrity(self) -> str:
        return "ok"  # PostgreSQL keeps its own pages consistent; nothing like SQLite's check

    def now(self) -> float:
        # The expression of runner_beats.ts's default (migration 0006): one clock for both.
        return float(self.query("SELECT EXTRACT(EPOCH FROM clock_timestamp())")[0][0])

    def append_all(self, batches: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]) -> int:
        sa = _import_sqlalchemy()
        work = []
        for table, rows in batches:
            if not rows:
                continue
            cols = self.columns(table)
            names = list(rows[0].keys())
            check_columns(table, names, cols)
            values = [tuple(_encode_pg(r.get(n)) for n in names) for r in rows]
            work.append((table, names, "id" in cols, values))
        last = 0
        try:
            with self._engine.begin() as conn:
                for table, names, has_id, values in work:
                    sql = insert_sql(table, names, "%s")
                    if len(values) == 1 and has_id:
                        last = int(conn.exec_driver_sql(sql + " RETURNING id", values[0]).scalar_one())
                    else:
                        conn.exec_driver_sql(sql, values)
                    if has_id and "id" in names:
                        # Rows that brought their own ids (ledger copy): the identity goes on past them.
                        conn.exec_driver_sql(
                            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                            f"GREATEST((SELECT MAX(id) FROM {table}), 1))"
                        )
        except sa.exc.IntegrityError as exc:
            if getattr(exc.orig, "sqlstate", None) == "23505":  # unique_violation
                raise LedgerConflict(f"{self.path}: {str(exc.orig).splitlines()[0]}") from None
            raise
        return last

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Row]:
        check_read_only(sql)
        text, args = adapt(sql, params)
        with self._engine.connect() as conn:
            result = conn.exec_driver_sql(text, args)
            keys = tuple(result.keys())
            return [PgRow(keys, r) for r in result]

    def close(self) -> None:
        self._engine.dispose()
