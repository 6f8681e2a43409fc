"""The append-only ledger (a SQLite file, or PostgreSQL with the postgres extra) and its schema."""

from wedgewatch.ledger.schema import SCHEMA_VERSION
from wedgewatch.ledger.store import Ledger

__all__ = ["SCHEMA_VERSION", "Ledger"]
