"""Where request rows go (the ledger's ``requests`` table or JSONL); ``ending.Ending.row`` makes them.

Rows are group-committed: every request that ends while a write is in progress joins the next
batch, so a busy proxy pays one SQLite transaction per batch, not per request, and the event loop
never waits on the disk (writes run in a worker thread). A handler awaits its own row before it
sends the client its last byte, so whoever sees a request end can already read its row.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wedgewatch.base.files import create_private
from wedgewatch.ledger import Ledger

log = logging.getLogger(__name__)


class RecordSink:
    """Writes request rows to a ledger, or to a JSONL file, or nowhere when given neither."""

    def __init__(self, ledger: Ledger | None = None, path: Path | None = None) -> None:
        self._ledger = ledger
        self._path = Path(path) if path is not None else None
        self._pending: list[tuple[str, dict[str, Any], asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        if self._path is not None:
            create_private(self._path)  # the user's only (base/files.py), its directories too

    @property
    def enabled(self) -> bool:
        return self._ledger is not None or self._path is not None

    def submit(self, row: Mapping[str, Any], table: str = "requests") -> asyncio.Future[None]:
        """Queue a row (a request's end, or with ``table="request_starts"`` its start); the
        future resolves once it is on disk (or its write failed and was logged). Starts go to a
        ledger only: a JSONL file of rows has one line per request, written at its end."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if not self.enabled or (table != "requests" and self._ledger is None):
            fut.set_result(None)
            return fut
        self._pending.append((table, dict(row), fut))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return fut

    async def write(self, row: Mapping[str, Any], table: str = "requests") -> None:
        # shield: a client that leaves while its row is written must not lose the row.
        await asyncio.shield(self.submit(row, table))

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await asyncio.to_thread(self._write_batch, [(table, row) for table, row, _ in batch])
            except Exception:
                log.exception("could not write %d request rows", len(batch))
            for _, _, fut in batch:
                if not fut.done():
                    fut.set_result(None)

    def _write_batch(self, rows: list[tuple[str, dict[str, Any]]]) -> None:
        if self._ledger is not None:
            # Starts before ends, in one transaction: a request that began and ended within one
            # batch never has its end without its start.
            starts = [row for table, row in rows if table == "request_starts"]
            ends = [row for table, row in rows if table == "requests"]
            self._ledger.append_all(
                [(t, r) for t, r in (("request_starts", starts), ("requests", ends)) if r]
            )
        elif self._path is not None:
            with self._path.open("a", encoding="utf-8") as fh:
                for _, row in rows:
                    fh.write(json.dumps(row, separators=(",", ":"), default=str) + "\n")

    async def close(self) -> None:
        if self._flusher is not None:
            await self._flusher
