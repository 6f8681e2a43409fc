"""The proxy alone in front of a server nobody here supervises (``wedgewatch proxy``): its request
records, and, given the server's /metrics, a scraper whose heartbeat makes deadlines count engine
time and finds a stopped engine. Start order: proxy, then scraper (it reads the proxy's requests
in flight); stop order the reverse, then the ledger is closed."""

from __future__ import annotations

from pathlib import Path

from wedgewatch.config import WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.proxy.engine_time import Scraper
from wedgewatch.stack.address import record_address
from wedgewatch.stack.listen import listen
from wedgewatch.stack.recovery import recover
from wedgewatch.wire.heartbeat import Feed


class ProxiedServer:
    """``ProxiedServer(upstream, watchdog, ...)``; ``await start(host, port)`` returns the proxy's
    URL; ``await stop()``."""

    def __init__(
        self,
        upstream: str,
        watchdog: WatchdogConfig,
        *,
        ledger_path: str | None = None,
        records: Path | None = None,
        metrics_url: str | None = None,
        scrape_interval: float = 1.0,
        heartbeat_window: float = 8.0,
        api_key: str | None = None,
        upstream_key: str | None = None,
    ) -> None:
        self.ledger = Ledger(ledger_path) if ledger_path is not None else None
        if self.ledger is not None:
            recover(self.ledger)  # what a killed proxy (or serve, run, wrap) left open
        self.scraper = Scraper(metrics_url, Feed(heartbeat_window), scrape_interval) if metrics_url else None
        self.proxy = Proxy(
            upstream,
            watchdog,
            ledger=self.ledger,
            records_path=records,
            feed=self.scraper.feed if self.scraper else None,
            api_key=api_key,
            upstream_key=upstream_key,
        )
        if self.scraper is not None:
            self.scraper.headers = {"Authorization": f"Bearer {upstream_key}"} if upstream_key else None
            # The proxy's own requests are work the server's gauges may not show (Scraper's doc).
            self.scraper.busy = lambda: self.proxy.in_flight() > 0
            self.scraper.view = lambda: self.proxy.held_on(None)

    async def start(self, host: str, port: int) -> str:
        url = await listen(self.proxy, host, port)
        if self.ledger is not None:
            record_address(self.ledger, url, None)
        if self.scraper is not None:
            self.scraper.start()
        return url

    async def stop(self) -> None:
        try:
            if self.scraper is not None:
                await self.scraper.stop()
            await self.proxy.stop()
        finally:
            if self.ledger is not None:
                self.ledger.close()
