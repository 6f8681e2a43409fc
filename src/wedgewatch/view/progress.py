"""How the requests in flight are going, which the ledger does not hold (a request is written when
it starts and when it ends): the proxies' read-only ``GET /wedgewatch/status``, read at most once a
second per proxy however many pages are open, and only while one is.

A stack records where its proxy listens as a ``proxy_started`` event row; the view reads the
latest few of a scope (a resumed run starts a new proxy) and any ``--proxy URL`` given. A proxy
that does not answer within ``TIMEOUT`` (its process ended, it is on another host) is no error:
its requests show what the ledger knows, and the page says the progress is missing. Tokens per
second "now" is the change of a request's tokens between two reads.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from wedgewatch.analysis.panels.scope import SERVE, Scope
from wedgewatch.base.vocab import PROXY_STARTED
from wedgewatch.ledger.store import Ledger

EVERY = 1.0
"""Seconds between two reads of one proxy's status."""
TIMEOUT = 1.0
LATEST = 3
"""Proxies of one scope looked at: the latest few that started."""


@dataclass
class Snapshot:
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # by request id
    watchdog: dict[str, Any] | None = None
    reached: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    rates: dict[str, float] = field(default_factory=dict)  # tokens per second now, by request id

    def source(self) -> str:
        if self.reached:
            return "progress from " + ", ".join(self.reached)
        if self.missed:
            return "no progress: the proxy does not answer (" + ", ".join(self.missed) + ")"
        return "no progress: no proxy recorded for this view"


def proxies(ledger: Ledger, scope: Scope) -> list[str]:
    """The status URLs of the scope's latest proxies, newest first."""
    cond = "run_id IS NULL" if scope.kind == SERVE else "run_id = ?"
    params: tuple[str, ...] = () if scope.kind == SERVE else (scope.id,)
    rows = ledger.query(
        f"SELECT detail_json FROM events WHERE kind = ? AND {cond} ORDER BY ts DESC, id DESC LIMIT {LATEST}",
        (PROXY_STARTED, *params),
    )
    urls = []
    for r in rows:
        try:
            url = json.loads(r[0] or "{}").get("url")
        except ValueError:
            continue
        if isinstance(url, str) and url.startswith("http"):
            urls.append(url.rstrip("/"))
    return urls


class Progress:
    """One per view process: the last status of each proxy, read again when a page asks and it is
    older than ``EVERY``."""

    def __init__(self, extra: Sequence[str] = ()) -> None:
        self.extra = [u.rstrip("/") for u in extra]
        self._last: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._tokens: dict[str, tuple[float, int]] = {}
        self._rates: dict[str, float] = {}
        self._lock = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None
        self.reads = 0  # how many times a proxy was asked (the bench reads it)
        key = os.environ.get("WEDGEWATCH_API_KEY")  # a proxy bound beyond loopback wants its key
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def snapshot(self, urls: Sequence[str]) -> Snapshot:
        wanted = list(dict.fromkeys([*urls, *self.extra]))
        async with self._lock:
            now = time.monotonic()
            stale = [u for u in wanted if now - self._last.get(u, (-1e9, None))[0] >= EVERY]
            if stale:
                got = await asyncio.gather(*(self._read(u) for u in stale))
                for u, status in zip(stale, got, strict=True):
                    self._last[u] = (now, status)
                    self._rate(now, status)
        snap = Snapshot()
        for u in wanted:
            status = self._last.get(u, (0.0, None))[1]
            if status is None:
                snap.missed.append(u)
                continue
            snap.reached.append(u)
            snap.watchdog = snap.watchdog or status.get("watchdog")
            for row in status.get("in_flight") or []:
                if isinstance(row, dict) and row.get("request_id"):
                    snap.rows[str(row["request_id"])] = row
        snap.rates = {k: v for k, v in self._rates.items() if k in snap.rows}
        return snap

    def _rate(self, now: float, status: dict[str, Any] | None) -> None:
        for row in (status or {}).get("in_flight") or []:
            rid, tokens = str(row.get("request_id")), int(row.get("tokens_out") or 0)
            before = self._tokens.get(rid)
            if before is not None and now > before[0]:
                self._rates[rid] = max(0.0, (tokens - before[1]) / (now - before[0]))
            self._tokens[rid] = (now, tokens)
        if len(self._tokens) > 20_000:  # ended requests' entries, dropped now and then
            self._tokens.clear()
            self._rates.clear()

    async def _read(self, url: str) -> dict[str, Any] | None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT))
        self.reads += 1
        try:
            async with self._session.get(url + "/wedgewatch/status", headers=self._headers) as r:
                if r.status != 200:
                    return None
                body = await r.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        return body if isinstance(body, dict) else None
