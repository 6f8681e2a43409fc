"""Where request rows go (the ledger's ``requests`` table or JSONL); ``ending.Ending.row`` makes them.

Rows are group-committed: every request that ends while a write is in progress joins the next
batch, so a busy proxy pays one SQLite transaction per batch, not per request, and the event loop
never waits on the disk (writes run in a worker thread). A handler awaits its own row before it
sends the client its last byte, so whoever sees a request end can already read its row.

A batch whose write fails (a full disk, an I/O error: ``bench chaos`` fills the ledger's file
system for real) is kept, in order, and written again after a pause that doubles up to
``RETRY_MAX`` seconds; its handlers are released at once, so no client waits on the disk. Rows
are lost only past ``HELD_MAX`` waiting rows, or when the sink closes with the disk still failing,
and each loss is logged with its count.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import LedgerConflict
from wedgewatch.base.files import create_private
from wedgewatch.ledger import Ledger

log = logging.getLogger(__name__)

RETRY_MAX = 5.0
"""Seconds between two tries of a failing write, at most (the first pause is a quarter second)."""
HELD_MAX = 100_000
"""Rows kept for a failing ledger (a few hundred MB at most); older ones are dropped past it."""


class RecordSink:
    """Writes request rows to a ledger, or to a JSONL file, or nowhere when given neither."""

    def __init__(self, ledger: Ledger | None = None, path: Path | None = None) -> None:
        self._ledger = ledger
        self._path = Path(path) if path is not None else None
        self._pending: list[tuple[str, dict[str, Any], asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False
        self._failing = False
        self._wake = asyncio.Event()
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
        if self._failing:
            fut.set_result(None)  # held for the next try: no handler waits on a failing disk
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return fut

    async def write(self, row: Mapping[str, Any], table: str = "requests") -> None:
        # shield: a client that leaves while its row is written must not lose the row.
        await asyncio.shield(self.submit(row, table))

    async def _flush(self) -> None:
        pause = 0.0
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await asyncio.to_thread(self._write_batch, [(table, row) for table, row, _ in batch])
            except LedgerConflict:
                log.warning("%d request rows were already in the ledger (a retried write)", len(batch))
            except Exception as exc:
                if pause == 0.0:
                    log.exception("could not write %d request rows; keeping them to try again", len(batch))
                else:
                    log.warning("could not write %d request rows yet: %s", len(batch), exc)
                self._failing = True
                self._release(batch)
                self._pending = batch + self._pending
                if len(self._pending) > HELD_MAX:
                    lost = len(self._pending) - HELD_MAX
                    log.error("dropped %d request rows: the ledger has failed for too long", lost)
                    self._pending = self._pending[lost:]
                if self._closing:
                    log.error("lost %d request rows: the ledger still fails at close", len(self._pending))
                    self._pending = []
                    return
                pause = min(max(0.25, 2 * pause), RETRY_MAX)
                with contextlib.suppress(TimeoutError):  # close() cuts the pause short
                    await asyncio.wait_for(self._wake.wait(), pause)
                continue
            pause, self._failing = 0.0, False
            self._release(batch)

    @staticmethod
    def _release(batch: list[tuple[str, dict[str, Any], asyncio.Future[None]]]) -> None:
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
        """Write what is waiting: at once if a retry is pausing, and once more only."""
        self._closing = True
        self._wake.set()
        if self._flusher is not None:
            await self._flusher
