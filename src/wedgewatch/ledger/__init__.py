"""The append-only ledger (SQLite, WAL) and its schema."""

from wedgewatch.ledger.schema import SCHEMA_VERSION
from wedgewatch.ledger.store import Ledger

__all__ = ["SCHEMA_VERSION", "Ledger"]
