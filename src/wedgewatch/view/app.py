"""The view's web application: aiohttp, read-only over one ledger, bound to 127.0.0.1.

Routes (every view has a URL; ``?status=&reason=&server=&instance=`` filter a run's attempts,
``?live=sse|poll|off`` picks how the page stays current):

    /                        every run of the ledger: its header and lanes
    /run/<id>, /wrap/<id>    one run, or one wrapped run: header, lanes, requests in flight,
                             attempts and their causes
    /serve                   the server lives of no run (``serve``, ``proxy``)
    /attempt/<id>, /life/<id>  one attempt's requests; one life's events, attempts, requests
    /stream/<page>           the page's server-sent events: a batch a second (``feed.py``); the
                             position to start from is the ``c`` query parameter, or the
                             ``Last-Event-ID`` a browser sends when it reconnects by itself
    /poll/<page>             the fallback: every panel at once, with an ETag (304 while nothing
                             changed)
    /static/...              htmx and its SSE extension (vendored, ``static/NOTICE.md``), view.js
"""

from __future__ import annotations

import asyncio
import hashlib
import html
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from wedgewatch.analysis.panels.chains import Filters
from wedgewatch.analysis.panels.scope import RUN, SERVE, WRAP, Scope, find, pick
from wedgewatch.base.errors import BadInput
from wedgewatch.ledger.store import Ledger
from wedgewatch.view import pages
from wedgewatch.view.cursor import Cursor, Follower
from wedgewatch.view.feed import EVERY, Live
from wedgewatch.view.progress import Progress, proxies

STATIC = Path(__file__).parent / "static"
MODES = ("sse", "poll", "off")


class View:
    """``View(ledger, target)``; ``app()`` is the aiohttp application. ``ledger`` may be a function
    that opens it: the view then serves at once and opens the ledger when a page asks and it
    exists (a command starting beside the view makes it), answering "not yet" until then."""

    def __init__(
        self,
        ledger: Ledger | Callable[[], Ledger],
        target: str,
        run_id: str | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self._opener = ledger if callable(ledger) else None
        self._ledger = None if callable(ledger) else ledger
        self._target = target
        self._follower = None if self._ledger is None else Follower(self._ledger, target)
        self.progress = Progress(extra)
        self.home = run_id
        self.title = f"wedgewatch view: {target}"
        self.streams = 0  # connections open now

    @property
    def ledger(self) -> Ledger:
        assert self._ledger is not None, "the ledger is opened before any handler runs"
        return self._ledger

    @property
    def follower(self) -> Follower:
        assert self._follower is not None
        return self._follower

    @web.middleware
    async def _opened(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self._ledger is None and self._opener is not None and not request.path.startswith("/static"):
            try:
                self._ledger = await asyncio.to_thread(self._opener)
            except BadInput as exc:
                return _missing(f"waiting for the ledger: {exc}", status=503)
            self._follower = Follower(self._ledger, self._target)
        return await handler(request)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Close the ledger the view opened itself (one it was given stays its owner's)."""
        if self._ledger is not None and self._opener is not None:
            self._ledger.close()

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._opened])
        r = app.router
        r.add_get("/", self._index)
        r.add_get("/run/{id}", self._page)
        r.add_get("/wrap/{id}", self._page)
        r.add_get("/serve", self._page)
        r.add_get("/attempt/{id}", self._attempt)
        r.add_get("/life/{id}", self._life)
        r.add_get("/stream{page:.*}", self._stream)
        r.add_get("/poll{page:.*}", self._poll)
        r.add_static("/static", STATIC, append_version=False)
        r.add_get("/favicon.ico", _no_content)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _cleanup(self, app: web.Application) -> None:
        await self.progress.close()

    # --- pages --------------------------------------------------------------------------------

    def _mode(self, request: web.Request) -> str:
        mode = request.query.get("live", "sse")
        return "" if mode == "off" else mode if mode in MODES else "sse"

    def _scope(self, page: str) -> Scope | None:
        """The scope a page's path names; None for the index. BadInput when there is none."""
        parts = [p for p in page.split("/") if p]
        if not parts:
            return None
        kind, ident = parts[0], "/".join(parts[1:])
        if kind not in (RUN, WRAP, SERVE):
            raise BadInput(f"no such page: {page}")
        return find(self.ledger, kind, ident)

    async def _index(self, request: web.Request) -> web.StreamResponse:
        if self.home is not None and "all" not in request.query:
            try:
                home = await asyncio.to_thread(pick, self.ledger, self.home)
            except BadInput:  # not in the ledger yet (``run --view``): its page waits for it
                home = None
            raise web.HTTPFound(home.path if home is not None else f"/{RUN}/{self.home}")
        mode = self._mode(request)
        cursor = await asyncio.to_thread(self.follower.now)
        stream = self._feed_url(mode, "", cursor, Filters())
        body = await asyncio.to_thread(pages.index_page, self.ledger, mode, stream, self.title)
        return _html(body)

    async def _page(self, request: web.Request) -> web.StreamResponse:
        try:
            scope = await asyncio.to_thread(self._scope, request.path)
        except BadInput as exc:
            return _missing(str(exc))
        assert scope is not None
        mode = self._mode(request)
        f = Filters.of(request.query)
        cursor = await asyncio.to_thread(self.follower.now)  # before the page's reads: nothing missed
        snap = await self.progress.snapshot(await asyncio.to_thread(proxies, self.ledger, scope))
        stream = self._feed_url(mode, scope.path, cursor, f)
        title = f"wedgewatch view: {scope.label}"
        body = await asyncio.to_thread(pages.scope_page, self.ledger, scope, f, snap, mode, stream, title)
        return _html(body)

    def _feed_url(self, mode: str, page: str, cursor: Cursor, f: Filters) -> str:
        if mode == "sse":
            query = "&".join(q for q in (f.query(), f"c={cursor.encode()}") if q)
            return f"/stream{page}?{query}"
        return f"/poll{page}?{f.query()}" if mode == "poll" else ""

    async def _attempt(self, request: web.Request) -> web.StreamResponse:
        ident = request.match_info["id"]
        body = await asyncio.to_thread(pages.attempt_page, self.ledger, ident, f"attempt {ident}")
        return _html(body) if body is not None else _missing(f"{self.ledger.path}: no attempt {ident!r}")

    async def _life(self, request: web.Request) -> web.StreamResponse:
        ident = request.match_info["id"]
        body = await asyncio.to_thread(pages.life_page, self.ledger, ident, f"server life {ident}")
        return _html(body) if body is not None else _missing(f"{self.ledger.path}: no server life {ident!r}")

    # --- live ---------------------------------------------------------------------------------

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        from aiohttp_sse import sse_response

        try:
            scope = await asyncio.to_thread(self._scope, request.match_info["page"])
        except BadInput as exc:
            return _missing(str(exc))
        # The browser's own reconnection sends the last batch's id; htmx's sends the URL's ``c``
        # (view.js keeps it at the last batch's position).
        cursor = Cursor.decode(request.headers.get("Last-Event-ID")) or Cursor.decode(request.query.get("c"))
        if cursor is None:
            cursor = await asyncio.to_thread(self.follower.now)
        live = Live(self.ledger, self.follower, self.progress, scope, Filters.of(request.query), cursor)
        async with sse_response(request, ping_interval=15.0) as resp:
            self.streams += 1
            try:
                while resp.is_connected():
                    t = time.monotonic()
                    batch = await live.step()
                    if batch:
                        await resp.send(batch, event="batch", id=live.cursor.encode())
                    await asyncio.sleep(max(0.05, EVERY - (time.monotonic() - t)))
            finally:
                self.streams -= 1
        return resp

    async def _poll(self, request: web.Request) -> web.StreamResponse:
        try:
            scope = await asyncio.to_thread(self._scope, request.match_info["page"])
        except BadInput as exc:
            return _missing(str(exc))
        f = Filters.of(request.query)
        cursor = await asyncio.to_thread(self.follower.now)
        snap = None
        if scope is not None:
            snap = await self.progress.snapshot(await asyncio.to_thread(proxies, self.ledger, scope))
        # The ledger's position, the proxies' progress and the filters: the same three, the same page.
        seen = repr(
            (
                cursor.encode(),
                sorted(
                    (k, v.get("tokens_out"), v.get("stall")) for k, v in (snap.rows if snap else {}).items()
                ),
                f.query(),
                int(time.time() // 5),
            )
        )
        etag = '"' + hashlib.sha1(seen.encode()).hexdigest()[:20] + '"'
        headers = {"ETag": etag, "Cache-Control": "no-cache"}
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers=headers)
        body = await asyncio.to_thread(_everything, self.ledger, scope, f, snap)
        return web.Response(text=body, content_type="text/html", headers=headers)


def _everything(ledger: Ledger, scope: Scope | None, f: Filters, snap: Any) -> str:
    if scope is None:
        return pages.index_body(ledger, oob=True)
    parts = [
        pages.header_html(ledger, scope),
        pages.lanes_html(ledger, scope, True),
        pages.flight_html(ledger, scope, snap)[0],
    ]
    if scope.kind == RUN:
        parts += [pages.causes_html(ledger, scope), pages.instances_html(ledger, scope, f)]
    return "".join(parts)


async def _no_content(request: web.Request) -> web.Response:
    return web.Response(status=204)


def _html(body: str) -> web.Response:
    return web.Response(text=body, content_type="text/html", headers={"Cache-Control": "no-store"})


def _missing(line: str, status: int = 404) -> web.Response:
    # Not there yet (a run about to start, a page opened early): the page looks again in 2 s.
    page = (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">'
        f'<title>not found</title></head><body><p>{html.escape(line)}</p><p><a href="/?all">every run</a></p></body></html>'
    )
    return web.Response(status=status, text=page, content_type="text/html")
