"""Where a supervised run stands, read from outside it: its serving life from the ledger (a
read-only connection, so the rig never writes a byte of the record it checks), and that life's
token progress and requests in flight from the server's own ``/metrics``.

``bench chaos`` schedules its faults on this progress, not on the clock: a fault is due once the
run has generated so many tokens, and one meant for a request in flight waits until a request
is running and has tokens of its own.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from wedgewatch.wire import promtext


@dataclass(frozen=True)
class Life:
    """A server life as the ledger has it."""

    life_id: str
    base_url: str
    pid: int | None
    started_at: float
    ready_at: float | None
    ended_at: float | None
    end_reason: str | None

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1].split("/")[0])


@dataclass(frozen=True)
class Reading:
    """One scrape: the progress counter and the running gauge."""

    ts: float
    tokens: float
    running: float


class Record:
    """A read-only view of a ledger another process writes (opened once it exists)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """The query's rows, or none while the ledger or its schema is not there yet."""
        if self._conn is None:
            if not self.path.exists():
                return []
            uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, timeout=10, check_same_thread=False)
            self._conn.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in self._conn.execute(sql, params)]
        except sqlite3.OperationalError:
            return []

    def lives(self) -> list[Life]:
        rows = self.rows(
            "SELECT life_id, base_url, pid, started_at, ready_at, ended_at, end_reason"
            " FROM server_life_view ORDER BY started_at"
        )
        return [Life(**r) for r in rows]

    def serving(self) -> Life | None:
        """The latest life that is ready and has not ended."""
        live = [lv for lv in self.lives() if lv.ready_at is not None and lv.ended_at is None]
        return live[-1] if live else None

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None


async def read(
    session: aiohttp.ClientSession, base_url: str, counter: str, gauge: str, timeout: float = 2.0
) -> Reading | None:
    """The server's counter and gauge now; None when it does not answer (stopped, dead)."""
    try:
        async with session.get(base_url + "/metrics", timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                return None
            samples = promtext.parse(await resp.text())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    return Reading(time.time(), samples.total(counter) or 0.0, samples.total(gauge) or 0.0)


class Progress:
    """Tokens generated across every life of a run: each life's counter starts at 0."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.reading: Reading | None = None

    def update(self, life_id: str, reading: Reading) -> None:
        self.last[life_id] = max(self.last.get(life_id, 0.0), reading.tokens)
        self.reading = reading

    @property
    def tokens(self) -> float:
        return sum(self.last.values())
