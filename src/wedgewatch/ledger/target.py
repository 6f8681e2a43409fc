"""What a ledger string names: a SQLite file (a path, the default) or a PostgreSQL database
(``postgresql://user@host:port/db``, also ``postgres://`` and ``postgresql+psycopg://``)."""

from __future__ import annotations

from pathlib import Path

from wedgewatch.base import redact
from wedgewatch.base.errors import BadInput

PG_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")


def backend_of(target: str) -> str:
    """'sqlite' or 'postgresql'; BadInput for a URL of any other kind."""
    if "://" not in target:
        return "sqlite"
    scheme = target.split("://", 1)[0].lower()
    if scheme in PG_SCHEMES:
        return "postgresql"
    if scheme == "sqlite":
        raise BadInput(f"ledger {target!r}: a SQLite ledger is a plain path, not a sqlite:// URL")
    raise BadInput(
        f"ledger {redact.url(target)!r}: unknown scheme {scheme!r} (a file path for SQLite, or postgresql://...)"
    )


def describe(target: str | Path) -> str:
    """The ledger string fit for a message or a log: a URL's password masked."""
    return redact.url(str(target))


def exists(target: str | Path) -> bool:
    """Whether there is a ledger there to read: the file for SQLite; a database is always taken
    to exist (opening it says otherwise, in one line)."""
    text = str(target)
    return backend_of(text) != "sqlite" or Path(text).exists()


def sqlalchemy_url(target: str) -> str:
    """The URL with SQLAlchemy's driver name for psycopg 3."""
    scheme, rest = target.split("://", 1)
    return f"postgresql+psycopg://{rest}" if scheme.lower() in PG_SCHEMES else target
