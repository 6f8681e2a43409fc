"""The one place SQLite-flavoured SQL meets PostgreSQL: ``?`` placeholders (and ``:name`` ones)
become psycopg's, ``%`` is escaped, rows read like ``sqlite3.Row``, and the few SQLite-only
functions the views use get their PostgreSQL spelling."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any


def placeholders(sql: str, named: bool = False) -> str:
    """``?`` -> ``%s`` (or ``:name`` -> ``%(name)s``) outside quoted literals, identifiers and
    comments; every ``%`` -> ``%%`` (psycopg reads ``%`` everywhere, literals included). A ``::``
    cast is left alone."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in ("'", '"'):
            j = i + 1
            while j < n:
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:  # '' or "" inside: an escaped quote
                        j += 2
                        continue
                    break
                j += 1
            out.append(sql[i : j + 1].replace("%", "%%"))
            i = j + 1
        elif c == "-" and sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(sql[i:j].replace("%", "%%"))
            i = j
        elif c == "%":
            out.append("%%")
            i += 1
        elif c == "?" and not named:
            out.append("%s")
            i += 1
        elif c == ":" and named and sql.startswith("::", i):
            out.append("::")
            i += 2
        elif c == ":" and named and (m := re.match(r":([A-Za-z_]\w*)", sql[i:])):
            out.append(f"%({m.group(1)})s")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def adapt(sql: str, params: Sequence[Any] | Mapping[str, Any]) -> tuple[str, Any]:
    """The SQL and parameters as psycopg takes them."""
    if isinstance(params, Mapping):
        return placeholders(sql, named=True), dict(params)
    return placeholders(sql), tuple(params)


def _plain(value: Any) -> Any:
    # SUM over integers is NUMERIC in PostgreSQL; SQLite gives an int (or a float).
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


class PgRow(tuple[Any, ...]):
    """A result row that reads like ``sqlite3.Row``: by index, by column name, ``keys()``, and
    ``dict(row)``; it unpacks and compares as the tuple of its values."""

    _keys: tuple[str, ...]

    def __new__(cls, keys: tuple[str, ...], values: Iterable[Any]) -> PgRow:
        row = super().__new__(cls, (_plain(v) for v in values))
        row._keys = keys
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                return tuple.__getitem__(self, self._keys.index(key))
            except ValueError:
                raise IndexError(f"no such column: {key}") from None
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._keys)


# SQLite-only spellings in the views (ledger/schema.py VIEWS) and their PostgreSQL ones.
_JSON_EXTRACT = re.compile(r"json_extract\((\w+(?:\.\w+)?), '\$\.([\w.]+)'\)")


def _json_path(m: re.Match[str]) -> str:
    keys = ",".join(m.group(2).split("."))
    return f"CAST(({m.group(1)})::jsonb #>> '{{{keys}}}' AS BIGINT)"


REWRITES: tuple[tuple[re.Pattern[str], Any], ...] = (
    (_JSON_EXTRACT, _json_path),  # json_extract(x, '$.a.b') -> (x)::jsonb #>> '{a,b}'
    (re.compile(r"\bchar\((\d+)\)"), r"chr(\1)"),
    (re.compile(r"\bTRIM\("), "BTRIM("),  # TRIM(x, chars): SQLite's two-argument form
    (re.compile(r"CAST\(([\w.]+) AS INTEGER\)"), r"CAST(\1 AS BIGINT)"),
)


def port_views(views: str) -> str:
    """The views' SQL in PostgreSQL's dialect. Only the spellings above differ; a test runs the
    same rows through both backends' views."""
    for pattern, repl in REWRITES:
        views = pattern.sub(repl, views)
    return views
