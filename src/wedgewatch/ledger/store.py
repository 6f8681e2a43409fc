"""The ledger: append-only facts on a backend picked by the ledger string.

A path (or ``:memory:``) is a SQLite file (``ledger/sqlite.py``, stdlib only, the embedded
default); ``postgresql://...`` is a PostgreSQL database (``ledger/pg``, the ``postgres`` extra).
Both keep the same tables and views and the same rule: only INSERT is ever issued. Callers write
SQLite-flavoured SQL with ``?`` placeholders; a backend that speaks another dialect adapts it in
one place (``ledger/pg/sql.py``), and rows read by name and by index on both.

``Ledger(target)`` returns the backend's own subclass, so every caller keeps ``Ledger(path)``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from wedgewatch.base import redact, registry
from wedgewatch.ledger.target import backend_of


class Row(Protocol):
    """A row as ``query`` returns it: by index, by column name, ``keys()``, ``dict(row)``."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def keys(self) -> list[str]: ...

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...


# The backends, by the scheme of the ledger string ("module:Class", imported when first used, so
# the SQLite default never imports SQLAlchemy).
BACKENDS: dict[str, str] = {
    "sqlite": "wedgewatch.ledger.sqlite:SqliteLedger",
    "postgresql": "wedgewatch.ledger.pg.store:PgLedger",
}


def encode(value: Any) -> Any:
    """A value as a column stores it: dicts and lists as JSON (secrets scrubbed), paths as text."""
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(redact.data(value), separators=(",", ":"), default=str)
    if isinstance(value, Path):
        return str(value)
    return value


def _backend(target: str) -> type[Ledger]:
    cls: type[Ledger] = registry.load(BACKENDS, backend_of(target), "ledger", "backend")
    return cls


def shares_runs(target: str | Path) -> bool:
    """Whether several runner processes may work on one run in the ledger ``target`` names (its
    backend's ``Ledger.shared``), told without opening it."""
    return _backend(str(target)).shared


class Ledger:
    """Open (creating if needed) a ledger. ``":memory:"`` works for unit tests."""

    path: str  # what messages name: the file, or the URL without its password
    # Whether several processes may write one run at once (PostgreSQL). On SQLite a run keeps
    # one writer process (resume refuses a second one).
    shared: bool = False

    def __new__(cls, target: str | Path, read_only: bool = False) -> Ledger:
        if cls is Ledger:
            cls = _backend(str(target))
        return super().__new__(cls)

    def __init__(self, target: str | Path, read_only: bool = False) -> None:
        """``read_only``: a reader's open. The target must be a wedgewatch ledger already
        (anything else is refused, BadInput, and left untouched), and nothing is written to it."""
        raise NotImplementedError  # every backend has its own

    # --- what each backend implements ---------------------------------------------------------

    def append_all(self, batches: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]) -> int:
        """Insert rows into several tables in one transaction: all of them or none. LedgerConflict
        when one breaks a unique key. Returns the last row's integer id where the table has one."""
        raise NotImplementedError

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Row]:
        """Read-only query (SQLite-flavoured SQL, ``?`` placeholders). Writes go through ``append``."""
        raise NotImplementedError

    def columns(self, table: str) -> list[str]:
        """The table's columns in their order (KeyError for no such table)."""
        raise NotImplementedError

    def tables(self) -> list[str]:
        """The ledger's tables (not its views), sorted."""
        raise NotImplementedError

    def schema_version(self) -> int:
        """The schema version of this ledger (after opening, always SCHEMA_VERSION)."""
        raise NotImplementedError

    def integrity(self) -> str:
        """'ok', or what the backend's own consistency check found."""
        raise NotImplementedError

    def now(self) -> float:
        """The database's clock (Unix seconds): the one clock runners on several hosts share,
        which stamps ``runner_beats`` and judges their leases."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # --- shared ---------------------------------------------------------------------------------

    def append_many(self, table: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert facts into one table in one transaction (see ``append_all``)."""
        return self.append_all([(table, rows)]) if rows else 0

    def append(self, table: str, row: Mapping[str, Any]) -> int:
        """Insert one fact. Dicts and lists are stored as JSON (secrets scrubbed). Returns rowid."""
        return self.append_many(table, [row])

    def event(self, kind: str, detail: Mapping[str, Any] | None = None, **ids: Any) -> None:
        """Shorthand for one row in ``events`` (ids: run_id, life_id, attempt_id)."""
        self.append("events", {"ts": time.time(), "kind": kind, "detail_json": dict(detail or {}), **ids})

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def insert_sql(table: str, names: Sequence[str], mark: str) -> str:
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join([mark] * len(names))})"


def check_columns(table: str, names: Sequence[str], cols: Sequence[str]) -> None:
    unknown = [n for n in names if n not in cols]
    if unknown:
        raise KeyError(f"ledger table {table!r} has no column(s) {unknown}")


def check_read_only(sql: str) -> None:
    head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
    if head not in ("SELECT", "WITH", "PRAGMA", "EXPLAIN"):
        raise ValueError("Ledger.query is read-only; use append")
