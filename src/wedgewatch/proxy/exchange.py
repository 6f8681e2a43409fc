"""One generation request through the proxy, from the client's body to its row. Its endings
(what the client is answered, and the row) are ``answers.py``; the legs of a request resumed on
the next life are ``resume/``; here are the body, the upstream, the stream loop and the timer.

A streaming client gets each SSE event's ``data`` bytes unchanged, framed afresh and written once
per upstream read; nothing is sent before the first token, so a request that fails before one (a
stall, an error) gets a plain HTTP status. A non-streaming request goes upstream as the client
sent it and its whole answer comes back as the server gave it (``Answers._whole``), watched by
``total_timeout`` and the engine's heartbeat only (``deadlines.Watch.whole``). One timer per
request sits at the ``Watch``'s earliest deadline, which closes the upstream connection: the
blocked read ends at once.
"""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from wedgewatch.base.clock import Timer
from wedgewatch.base.errors import FrameTooLarge
from wedgewatch.base.protocols import Router, Upstream
from wedgewatch.base.vocab import (
    CLIENT_ERROR,
    CLIENT_SLOW_BODY,
    CONNECTION,
    REPLY_NOT_API,
    REPLY_TOO_LARGE,
    STREAM_UNFINISHED,
)
from wedgewatch.proxy.answers import CLIENT_GONE
from wedgewatch.proxy.arrival import Arrival
from wedgewatch.proxy.body import Asked, Refused, read_within, rewrite
from wedgewatch.proxy.deadlines import Stall, Watch
from wedgewatch.proxy.dialects import make_relay
from wedgewatch.proxy.dialects.chat import Relay, StreamRelay
from wedgewatch.proxy.dialects.kind import Kind
from wedgewatch.proxy.dialects.typed import TypedRelay
from wedgewatch.proxy.http import error_object, error_response, forward_headers
from wedgewatch.proxy.resume import KeepAlive, Legs, Resume, ask
from wedgewatch.proxy.shared import Shared
from wedgewatch.proxy.upstream import post
from wedgewatch.wire.sse import SSEParser

log = logging.getLogger(__name__)

_UPSTREAM_FAILED = (aiohttp.ClientError, OSError, asyncio.TimeoutError)


class _Stalled(Exception):
    """Internal: the watchdog closed the upstream connection."""


class Exchange(Legs):
    def __init__(
        self,
        ctx: Shared,
        request: web.Request,
        kind: Kind,
        path: str,
        arrival: Arrival,
        upstream: Upstream,
        router: Router | None = None,
    ) -> None:
        self.ctx = ctx
        self.request = request
        self.kind = kind
        self.path = path  # "/v1/chat/completions", without the /a/<attempt_id> prefix
        self.arrival = arrival
        self.attempt_id = arrival.attempt_id
        self.request_id = f"{ctx.ids.getrandbits(64):016x}"
        self.started_at = time.time()
        self.t0 = ctx.clock()
        self.watch = Watch(ctx.cfg, self.t0, ctx.metrics.itl, engine=ctx.engine)
        self.upstream = upstream  # the server (a pool's member) this request goes to
        self.router = router  # the pool it came from: another member, or the next life, on a resume
        self.life = upstream.life()
        self.base_url = upstream.base_url.rstrip("/")
        self.model: str | None = None
        self.client_stream = False
        self.stall: Stall | None = None
        self.relay: StreamRelay = make_relay(kind, self.watch)
        self.out: web.StreamResponse | None = None  # set once the client's stream has begun
        self._held: list[bytes] = []  # frames before the first token: sent with it, or never
        self._tail: list[bytes] = []  # frames from [DONE] on: sent with the end, after the row
        self._up: CIMultiDict[str] = CIMultiDict()  # the server's headers, passed on
        self._fetch: asyncio.Future[aiohttp.ClientResponse] | None = None
        self._resp: aiohttp.ClientResponse | None = None
        self._timer: Timer | None = None
        self._ended = False
        self._start_written = False  # its request_starts row is on disk
        self.asked: Asked | None = None
        self.legs: list[str] = []  # the request ids this request had before a resume, oldest first
        self.prior_tokens = 0  # tokens relayed by the legs before this one
        self.resumes = 0
        self.hide_ids = False  # the proxy asked for token ids the client did not (resume/token_ids.py)
        self.leg_path: str | None = None  # where this leg goes when not ``path`` (a completion)
        self._no_resume = False  # a resume found no next life: the request fails as it is
        self.keep = KeepAlive(ctx.clock, ctx.cfg.keepalive_interval)  # a held stream's comments
        # Waiting on the upstream (its headers or its next bytes), not on the client: what the
        # supervisor counts as work held on the life (``Proxy.held_on``). A client slow to read
        # holds the proxy in a write, and a server that has finished is not wedged by it.
        self.waiting = False

    @property
    def ended(self) -> bool:
        return self._ended

    def _arm(self, when: float) -> None:
        self._timer = self.ctx.clock.call_later(max(0.0, when - self.ctx.clock()), self._on_timer)

    def _rearm(self) -> None:
        """The first token moves the deadline from ``ttft_timeout`` to ``stall_timeout``, which can
        be earlier; after it, deadlines only move later: a timer that fires early re-arms."""
        if self._timer is not None:
            self._timer.cancel()
        self._arm(self.watch.deadline()[0])

    def _on_timer(self) -> None:
        self._timer = None
        if self._ended:
            return
        result = self.watch.check(self.ctx.clock())
        if isinstance(result, float):
            self._arm(result)
            return
        if not self.relay.done:
            self.stall = result
        self._abort_upstream()

    def stalled(self, stall: Stall) -> None:
        """A stall decided from the server's heartbeat (engine deadlines, or the engine-stopped
        verdict) rather than by this request's timer: the same ending as a timer's."""
        if self._ended or self.relay.done or self.stall is not None:
            return
        self.stall = stall
        self._abort_upstream()

    def seconds_since_token(self, now: float) -> float:
        return now - (self.watch.last if self.watch.last is not None else self.t0)

    async def run(self) -> web.StreamResponse:
        try:
            return await self._run()
        except asyncio.CancelledError:
            # aiohttp cancels the handler when the client disconnects: abort upstream at once.
            self._abort_upstream()
            if not self._ended:
                self._record(*self._left())
            raise
        finally:
            self._ended = True
            self.keep.cancel()
            if self._timer is not None:
                self._timer.cancel()
            if self._resp is not None:
                self._resp.release()

    async def _run(self) -> web.StreamResponse:
        raw = await read_within(self.request, self.ctx.clock, self.ctx.cfg.body_timeout)
        if raw is None:
            msg = f"the client did not send its whole body within {self.ctx.cfg.body_timeout:g} s"
            await self._end(CLIENT_SLOW_BODY, 408, {"error": msg})
            late = error_response(
                408, error_object("invalid_request_error", CLIENT_SLOW_BODY, msg), self.request_id
            )
            late.force_close()  # the rest of the body may still come: it is no next request
            return late
        asked = rewrite(raw, usage_option=self.kind in ("chat", "completion"))
        if isinstance(asked, Refused):
            await self._end(CLIENT_ERROR, 400, {"error": asked.message})
            return error_response(
                400, error_object("invalid_request_error", asked.code, asked.message), self.request_id
            )
        self.asked = asked
        self.model, self.client_stream = asked.model, asked.client_stream
        self.relay.want_usage = asked.want_usage
        # What the client has received, read back only by a resume (chat and completions: to
        # continue from its text; the Responses and Messages APIs: to replay up to it, resume/replay.py).
        if (
            self.ctx.cfg.on_wedge == "resume"
            and self.client_stream
            and isinstance(self.relay, Relay | TypedRelay)
        ):
            self.relay.sent = []
        payload = asked.payload
        if self.ctx.cfg.fingerprints:
            self.arrival.hash_body(asked.body)
        if isinstance(self.relay, Relay) and self.relay.sent is not None and self._by_ids_here():
            # The ids the server generates, kept with the chunks for an exact continuation.
            self.asked, own = ask(asked)
            payload, self.hide_ids = self.asked.payload, not own
            self.relay.hide_ids = self.hide_ids
        if self.arrival.unavailable is not None:
            return await self._fail(CONNECTION, 502, "upstream_error", self.arrival.unavailable)
        while True:
            try:
                return await self._leg(payload)
            except Resume as turn:
                nxt = await self._turn(turn)
                if isinstance(nxt, web.StreamResponse):
                    return nxt
                payload = nxt

    async def _leg(self, payload: bytes) -> web.StreamResponse:
        """One try of the request on one server life (one row in the ledger)."""
        # Its start row before it goes upstream: a proxy killed from here on leaves a start
        # without an end, which the next process to open the ledger ends ``interrupted``.
        await self.ctx.sink.write(self._start_row(), "request_starts")
        self._start_written = True
        # The deadlines start now, as the upstream gets the request: time the client took to send
        # its body, or the proxy waited for a ready server, is not the server's to answer for.
        self.watch.start = self.ctx.clock()
        self.watch.whole = not self.client_stream
        self._arm(self.watch.deadline()[0])
        try:
            self.waiting = True
            resp = await self._open(payload)
            if resp.status >= 400:
                return await self._upstream_status(resp)
            if not self.client_stream or "text/event-stream" not in resp.headers.get("Content-Type", ""):
                return await self._whole(resp)
            return await self._stream(resp)
        except _Stalled:
            return await self._stalled()
        except _UPSTREAM_FAILED as exc:
            if self.stall is not None:
                return await self._stalled()
            where = f"after {self.watch.tokens} tokens" if self.watch.tokens else "before any token"
            msg = f"upstream connection failed {where}: {type(exc).__name__}: {exc}"
            return await self._fail(CONNECTION, 502, "upstream_error", msg)

    async def _open(self, payload: bytes) -> aiohttp.ClientResponse:
        # content-encoding: aiohttp decodes a compressed request body on read, so what goes on is plain.
        headers = forward_headers(self.request.headers, drop=("accept-encoding", "content-encoding"))
        # SSE must not be buffered by a compressor; a whole answer is read and judged here anyway.
        headers["Accept-Encoding"] = "identity"
        headers["Content-Type"] = "application/json"
        query = f"?{self.request.query_string}" if self.request.query_string else ""
        url = self.base_url + (self.leg_path or self.path) + query
        self._fetch = asyncio.ensure_future(post(self.ctx.session, url, payload, headers, self.request_id))
        try:
            self._resp = await self._fetch
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self.stall is None or (task is not None and task.cancelling()):
                raise
            raise _Stalled from None
        finally:
            self._fetch = None
        if self.stall is not None:  # the deadline passed as the headers arrived
            raise _Stalled
        return self._resp

    async def _stream(self, resp: aiohttp.ClientResponse) -> web.StreamResponse:
        parser = SSEParser(self.ctx.cfg.max_frame_bytes)
        content = resp.content
        clock = self.ctx.clock
        relay = self.relay
        # The server's own headers go on to the client (CORS, its request id, X-Accel-Buffering).
        self._up = forward_headers(resp.headers, drop=("content-encoding",))
        eof = False
        while not eof:
            self.waiting = not relay.done
            try:
                chunk = await content.readany()
            except _UPSTREAM_FAILED:
                if self.stall is not None:
                    raise _Stalled from None
                if not relay.done:
                    raise
                chunk = b""
            try:
                if chunk:
                    events = parser.feed(chunk)
                else:
                    eof = True
                    events = parser.close()
            except FrameTooLarge as exc:
                return await self._fail(
                    REPLY_TOO_LARGE, 502, "upstream_error", f"the upstream's stream sent {exc}"
                )
            now = clock()
            had_tokens = self.watch.tokens
            frames = relay.frames(events, now, self.out is not None, eof)
            if relay.fault is not None:
                return await self._fail(relay.fault[0], 502, "upstream_error", relay.fault[1])
            if not had_tokens and self.watch.tokens:
                self._rearm()
            if self.out is None:
                self._held += frames
                if relay.error is not None and not self.watch.tokens:
                    break  # nothing sent yet: the error is answered with its own HTTP status
                if not (self.watch.tokens or relay.done):
                    continue  # a stream cut before any token is answered with a plain 502
                frames, self._held = self._held, []
            if relay.done:
                # [DONE] goes out with the end of the response (one write), once the row is written.
                self._tail += frames
                continue
            self.waiting = False
            if self.keep.running:  # a resumed leg's first bytes end the held stream's comments
                await self.keep.stop()
            try:
                if self.out is None:
                    self.out = await self._begin()
                if frames:
                    await self.out.write(b"".join(frames))
            except CLIENT_GONE:
                return await self._client_gone()
        if relay.error is not None:
            return await self._in_stream_error()
        if not relay.done and relay.finish is None:
            msg = f"the upstream stream ended without {relay.END} after {self.watch.tokens} tokens"
            return await self._fail(STREAM_UNFINISHED, 502, "upstream_error", msg)
        if not relay.answered:
            msg = f"the upstream stream ended with {relay.END} but held no answer"
            return await self._fail(REPLY_NOT_API, 502, "upstream_error", msg)
        return await self._ok()
