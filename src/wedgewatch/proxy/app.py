"""The watchdog proxy as a library object: ``Proxy(upstream).start()`` in any event loop.

Routes: ``/a/<attempt_id>/<path>`` tags a request with an attempt (or, under ``wrap``, with
whatever tag the harness chose: an instance id); ``/<path>`` takes its tag from the
``tag_header`` request header, or is untagged; POST to a path of ``GENERATIONS`` is a watched
generation, any other request passes through. ``/wedgewatch/metrics`` and ``/wedgewatch/status``
are the proxy's own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from wedgewatch.base import redact
from wedgewatch.base.clock import SYSTEM, Clock
from wedgewatch.base.events import EventBus
from wedgewatch.base.protocols import Router, Upstream
from wedgewatch.config import WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy.arrival import Arrival, wait_for_life
from wedgewatch.proxy.body import runs_detached
from wedgewatch.proxy.deadlines import engine_deadlines
from wedgewatch.proxy.dialects.kind import Kind
from wedgewatch.proxy.engine_time import EngineWatch
from wedgewatch.proxy.exchange import Exchange
from wedgewatch.proxy.http import error_object, error_response
from wedgewatch.proxy.metrics import ProxyMetrics
from wedgewatch.proxy.passthrough import passthrough
from wedgewatch.proxy.records import RecordSink
from wedgewatch.proxy.shared import Shared
from wedgewatch.proxy.upstream import StaticUpstream
from wedgewatch.wire import access
from wedgewatch.wire.heartbeat import Feed

log = logging.getLogger(__name__)

# Without /v1 too: llama.cpp (and clients given its root as base URL) use both; passed on
# unwatched, such a stream could hang for ever. A server without them answers 404 as it would.
GENERATIONS: dict[str, Kind] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completion",
    "/chat/completions": "chat",
    "/completions": "completion",
    "/v1/responses": "responses",
    "/responses": "responses",
    "/v1/messages": "messages",  # Anthropic's Messages API (vLLM, llama.cpp)
}
_ATTEMPT = re.compile(r"^/a/([A-Za-z0-9._:-]{1,128})(/.*)$")


class Proxy:
    """The watchdog proxy. ``upstream`` is an ``Upstream`` (read at each request's start, so a
    supervisor can swap server lives underneath) or a URL. ``feed`` is the server's heartbeat
    (``Supervisor.feed``, or a standalone ``Scraper``'s): with it, deadlines count engine time
    (``watchdog.deadlines``) and the engine-stopped verdict ends every request in flight."""

    def __init__(
        self,
        upstream: Upstream | str,
        watchdog: WatchdogConfig | None = None,
        *,
        ledger: Ledger | None = None,
        records_path: Path | None = None,
        bus: EventBus | None = None,
        clock: Clock = SYSTEM,
        feed: Feed | None = None,
        routes: Sequence[web.RouteDef] = (),
        api_key: str | None = None,
        upstream_key: str | None = None,
        open_paths: Sequence[str] = (),
    ) -> None:
        # ``api_key``: the incoming key, checked on every route but /health and ``open_paths``,
        # and taken off before a request goes upstream with ``upstream_key`` (wire/access.py).
        self._access = access.middleware(
            api_key, upstream_key=upstream_key, forwards=True, open_paths=open_paths
        )
        self.feed = feed
        self._routes = list(routes)  # served beside the proxy's own (a serve's /wedgewatch/restart)
        self._engine: EngineWatch | None = None
        self.upstream: Upstream = StaticUpstream(upstream) if isinstance(upstream, str) else upstream
        self.watchdog = watchdog or WatchdogConfig()
        if self.watchdog.record_only:
            # Deadlines out of any run's reach (about 11 days), no rate check, no engine stops.
            never = {k: 1e6 for k in ("ttft_timeout", "stall_timeout", "total_timeout")}
            # Nor a resume: a harness without a watchdog sees its requests fail with their server.
            update = {**never, "min_rate": 0.0, "deadlines": "wall", "on_wedge": "fail"}
            self.watchdog = self.watchdog.model_copy(update=update)
            self.feed = None
        self._bus = bus or EventBus()
        self._clock = clock
        self._sink = RecordSink(ledger, None if ledger is not None else records_path)
        self._ctx: Shared | None = None
        self._runner: web.AppRunner | None = None
        self._inflight: dict[str, Exchange] = {}  # generation requests by request id
        self._url: str | None = None

    @property
    def bus(self) -> EventBus:
        return self._bus

    @property
    def url(self) -> str:
        """Root URL of the proxy (``http://127.0.0.1:PORT``); clients use ``url + "/v1"``."""
        if self._url is None:
            raise RuntimeError("the proxy is not started")
        return self._url

    def in_flight(self, attempt_id: str | None = None) -> int:
        """Generation requests in flight (only those of ``attempt_id`` when given)."""
        if self._ctx is None:
            return 0
        if attempt_id is None:
            return len(self._inflight)
        return sum(1 for ex in self._inflight.values() if ex.attempt_id == attempt_id)

    def held_on(self, life_id: str | None) -> tuple[int, int]:
        """What this proxy knows of one server life (a ``ProxyView``; None: the server nobody
        supervises): the requests it holds waiting on it, and the tokens it has relayed from it
        so far. Whoever watches the server counts the first as work and the second as movement,
        whatever the server's own metrics say."""
        held = relayed = 0
        for ex in list(self._inflight.values()):
            if (ex.life.life_id if ex.life is not None else None) != life_id or ex.ended:
                continue
            relayed += ex.watch.tokens
            if ex.waiting:
                held += 1
        done = self._ctx.relayed.get(life_id or "", 0) if self._ctx is not None else 0
        return held, relayed + done

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        # Under the 5 s after which uvicorn (vLLM, SGLang) and llama.cpp close an idle connection,
        # so the proxy seldom writes on one the server is closing.
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=4)
        session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),  # the watchdog owns deadlines
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        metrics = ProxyMetrics(lambda: float(self.in_flight()))
        self._ctx = Shared(session, self.upstream, self.watchdog, self._clock, self._bus, self._sink, metrics)
        if self.feed is not None:
            self._ctx.engine = engine_deadlines(self.watchdog, self.feed.heartbeat)
            self._engine = EngineWatch(self._inflight, self._clock, self.feed, self._ctx.engine)
        app = web.Application(client_max_size=64 * 1024**2, middlewares=[self._access])
        app.router.add_get("/wedgewatch/metrics", self._metrics)
        app.router.add_get("/wedgewatch/status", self._status)
        app.add_routes(self._routes)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        # handler_cancellation: a client that disconnects cancels its handler, which aborts upstream.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        # The address really bound (0.0.0.0 stays 0.0.0.0: every interface), not the one asked for.
        self._url = access.bound_url(self._runner.addresses[0])
        log.info("proxy on %s -> %s", self._url, self.upstream.base_url)
        return self._url

    async def stop(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._ctx is not None:
            await self._ctx.session.close()
        await self._sink.close()

    async def __aenter__(self) -> Proxy:
        if self._url is None:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- handlers -----------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        ctx = self._ctx
        assert ctx is not None
        path, attempt_id = request.path, None
        m = _ATTEMPT.match(path)
        if m is not None:
            attempt_id, path = m.group(1), m.group(2)
        elif path.startswith("/a/"):
            msg = f"bad attempt path {path!r}: expected /a/<attempt_id>/v1/..."
            return error_response(404, error_object("invalid_request_error", "bad_attempt_path", msg))
        else:
            attempt_id = request.headers.get(self.watchdog.tag_header) or None
        kind = GENERATIONS.get(path) if request.method == "POST" else None
        if kind == "responses" and runs_detached(await request.read()):
            kind = None  # a background response: answered at once, generated detached
        # A restart (or a first life not yet ready) is not an error for a request that arrives
        # meanwhile: it waits for the next ready life, then goes to that life's address (in a
        # pool: for any member's, then to the member the router picks among the ready ones).
        waited, unavailable = await wait_for_life(ctx.upstream, self.watchdog.restart_wait)
        router = ctx.upstream if isinstance(ctx.upstream, Router) else None
        upstream = router.route(attempt_id) if router is not None else ctx.upstream
        try:
            if kind is None:
                return await passthrough(ctx, request, path, upstream)
            ex = Exchange(
                ctx, request, kind, path, Arrival(attempt_id, waited, unavailable), upstream, router
            )
            # Keyed by the object, not its request id: a resumed request takes a new id per leg.
            key = f"x{id(ex)}"
            self._inflight[key] = ex
            try:
                return await ex.run()
            finally:
                self._inflight.pop(key, None)
                upstream = ex.upstream  # a resume may have moved it to another member
        finally:
            if router is not None:
                router.release(upstream)

    async def _metrics(self, request: web.Request) -> web.Response:
        assert self._ctx is not None
        return web.Response(
            body=self._ctx.metrics.render(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def _status(self, request: web.Request) -> web.Response:
        # Compact: the view asks once a second, and the indented form takes the pure-Python
        # encoder (five times the C one's time for 256 rows, on the proxy's event loop).
        return web.Response(text=json.dumps(self.status()), content_type="application/json")

    def status(self) -> dict[str, Any]:
        """What ``/wedgewatch/status`` shows: each in-flight request and how long since its last token."""
        now = self._clock()
        rows = []
        for ex in list(self._inflight.values()):
            rows.append(
                {
                    "request_id": ex.request_id,
                    "attempt_id": ex.attempt_id,
                    "path": ex.path,
                    "model": ex.model,
                    "life_id": ex.life.life_id if ex.life else None,
                    "client_stream": ex.client_stream,
                    "elapsed": round(now - ex.t0, 3),
                    "tokens_out": ex.watch.tokens,
                    "ttft": None if ex.watch.ttft is None else round(ex.watch.ttft, 3),
                    "seconds_since_last_token": round(ex.seconds_since_token(now), 3),
                    # The stall the proxy found (it is ending the request, or holding it for a
                    # resume), and the ids of the legs before this one (a resumed request).
                    "stall": ex.stall.kind if ex.stall is not None else None,
                    "legs": list(ex.legs),
                }
            )
        return {
            "upstream": redact.url(self.upstream.base_url),  # a password in it stays hidden
            "watchdog": self.watchdog.model_dump(),
            "deadlines": "engine" if self._ctx is not None and self._ctx.engine else "wall",
            "loop": type(asyncio.get_running_loop()).__module__.split(".")[0],  # asyncio or uvloop
            "in_flight": rows,
        }
