"""One generation request through the proxy, from the client's body to its row. It is long because
a request's life is one idea that every ending must see whole: the body, the upstream's answer
judged event by event, the watchdog's timer, each way it can end (ok, a stall, a fault of the
reply, the client gone), each writing its row before the client's last byte, and the resume that
turns an ending on a replaced life into the next leg on the next life (``resume.py`` holds what is
sent there and how its reply is spliced in; the legs are here, because every ending can become one).

The upstream is always asked for a stream. A streaming client gets each SSE event's ``data`` bytes
unchanged, framed afresh and written once per upstream read; nothing is sent before the first token,
so a request that fails before one (a stall, an error) gets a plain HTTP status. One timer per
request sits at the ``Watch``'s earliest deadline, which closes the upstream connection: the
blocked read ends at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from wedgewatch.base.clock import Timer
from wedgewatch.base.errors import FrameTooLarge
from wedgewatch.base.protocols import Resumable, Router, Upstream
from wedgewatch.base.vocab import (
    CLIENT_DISCONNECT,
    CLIENT_ERROR,
    CLIENT_SLOW_BODY,
    CONNECTION,
    OK,
    REPLY_NOT_API,
    REPLY_TOO_LARGE,
    RESUMABLE,
    RESUMED,
    STALL_KINDS,
    STREAM_UNFINISHED,
    UPSTREAM_HTTP_PREFIX,
    upstream_http,
)
from wedgewatch.proxy.arrival import Arrival
from wedgewatch.proxy.body import Asked, Refused, read_within, rewrite
from wedgewatch.proxy.chat_replay import ChatReplay, refused
from wedgewatch.proxy.deadlines import Stall, Watch
from wedgewatch.proxy.dialects import make_relay
from wedgewatch.proxy.dialects.assemble import Kind
from wedgewatch.proxy.dialects.chat import Relay, StreamRelay, decode
from wedgewatch.proxy.dialects.chat_bytes import snippet
from wedgewatch.proxy.dialects.typed import TypedRelay
from wedgewatch.proxy.ending import Ending
from wedgewatch.proxy.http import (
    REQUEST_ID_HEADER,
    cut_short,
    error_object,
    error_response,
    forward_headers,
)
from wedgewatch.proxy.replay import Replay
from wedgewatch.proxy.replies import error_verdict, read_capped, whole_body
from wedgewatch.proxy.resume import Relayed, Splice, continuation
from wedgewatch.proxy.shared import Shared
from wedgewatch.proxy.token_ids import COMPLETIONS, TOKEN_IDS, ask, with_budget
from wedgewatch.proxy.upstream import post
from wedgewatch.wire.sse import SSEParser

log = logging.getLogger(__name__)

_CLIENT_GONE = (ConnectionError, aiohttp.ClientConnectionResetError)
_UPSTREAM_FAILED = (aiohttp.ClientError, OSError, asyncio.TimeoutError)


class _Stalled(Exception):
    """Internal: the watchdog closed the upstream connection."""


class _Resume(Exception):
    """Internal: the life under this request is being replaced and the request goes on, on the
    next one (``resume.py``): the failure it would have been, and what to send there."""

    def __init__(
        self, outcome: str, message: str, extra: dict[str, Any], payload: bytes, relayed: Relayed | None
    ):
        super().__init__(message)
        self.outcome, self.message, self.extra = outcome, message, extra
        self.payload = payload
        self.relayed = relayed  # None: sent again whole


class Exchange:
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
        self.hide_ids = False  # the proxy asked for token ids the client did not (token_ids.py)
        self.leg_path: str | None = None  # where this leg goes when not ``path`` (a completion)
        self._no_resume = False  # a resume found no next life: the request fails as it is
        # Waiting on the upstream (its headers or its next bytes), not on the client: what the
        # supervisor counts as work held on the life (``Proxy.held_on``). A client slow to read
        # holds the proxy in a write, and a server that has finished is not wedged by it.
        self.waiting = False

    @property
    def ended(self) -> bool:
        return self._ended

    # --- the watchdog timer -------------------------------------------------------------------

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

    def _abort_upstream(self) -> None:
        """Close the upstream connection now: a vLLM request whose client left is aborted."""
        if self._resp is not None:
            self._resp.close()
        elif self._fetch is not None:
            self._fetch.cancel()

    def seconds_since_token(self, now: float) -> float:
        return now - (self.watch.last if self.watch.last is not None else self.t0)

    # --- the request --------------------------------------------------------------------------

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
        # continue from its text; the Responses and Messages APIs: to replay up to it, replay.py).
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
            except _Resume as turn:
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
        self._arm(self.watch.deadline()[0])
        try:
            self.waiting = True
            resp = await self._open(payload)
            if resp.status >= 400:
                return await self._upstream_status(resp)
            if "text/event-stream" not in resp.headers.get("Content-Type", ""):
                return await self._plain(resp)
            return await self._stream(resp)
        except _Stalled:
            return await self._stalled()
        except _UPSTREAM_FAILED as exc:
            if self.stall is not None:
                return await self._stalled()
            where = f"after {self.watch.tokens} tokens" if self.watch.tokens else "before any token"
            msg = f"upstream connection failed {where}: {type(exc).__name__}: {exc}"
            return await self._fail(CONNECTION, 502, "upstream_error", msg)

    def _start_row(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "attempt_id": self.attempt_id,
            "life_id": self.life.life_id if self.life is not None else None,
            "path": self.path,
            "model": self.model,
            "client_stream": int(self.client_stream),
            "started_at": self.started_at,
            **self.ctx.me.columns(),
        }

    async def _open(self, payload: bytes) -> aiohttp.ClientResponse:
        # content-encoding: aiohttp decodes a compressed request body on read, so what goes on is plain.
        headers = forward_headers(self.request.headers, drop=("accept-encoding", "content-encoding"))
        headers["Accept-Encoding"] = "identity"  # SSE must not be buffered by a compressor
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

    async def _whole(self, resp: aiohttp.ClientResponse) -> bytes | None:
        """The upstream's whole body, capped (``max_body_bytes``): None past the cap."""
        data = await read_capped(resp, self.ctx.cfg.max_body_bytes)
        if data is not None and data:
            self.watch.progress(self.ctx.clock())
        return data

    def _too_large(self, what: str) -> str:
        return f"the upstream sent {what} of more than {self.ctx.cfg.max_body_bytes} bytes"

    async def _upstream_status(self, resp: aiohttp.ClientResponse) -> web.StreamResponse:
        data = await read_capped(resp, self.ctx.cfg.max_body_bytes)
        if data is None:
            return await self._fail(REPLY_TOO_LARGE, 502, "upstream_error", self._too_large("an error body"))
        if resp.status < 500:
            # The client's fault: the upstream's answer goes back unchanged.
            await self._end(CLIENT_ERROR, resp.status, {"error": snippet(data)})
            headers = forward_headers(resp.headers, drop=("content-encoding",))
            headers[REQUEST_ID_HEADER] = self.request_id
            return web.Response(status=resp.status, body=data, headers=headers)
        msg = f"upstream answered HTTP {resp.status}: {snippet(data)}"
        return await self._fail(upstream_http(resp.status), resp.status, "upstream_error", msg)

    async def _plain(self, resp: aiohttp.ClientResponse) -> web.StreamResponse:
        """An upstream that ignored ``stream: true``: its one answer goes back as it is, when it
        is the API's answer; anything else (an HTML page, text, other JSON) is the server's fault."""
        data = await read_capped(resp, self.ctx.cfg.max_body_bytes)
        if data is None:
            return await self._fail(REPLY_TOO_LARGE, 502, "upstream_error", self._too_large("a body"))
        fault = whole_body(self.kind, resp.headers.get("Content-Type", ""), data)
        if fault is not None:
            return await self._fail(fault[0], 502, "upstream_error", fault[1])
        self.watch.progress(self.ctx.clock())
        self.relay.done = True
        obj = decode(data)
        self.relay.usage = obj.get("usage") if obj is not None else None
        await self._end(OK, resp.status, {"upstream_streamed": False})
        headers = forward_headers(resp.headers, drop=("content-encoding",))
        headers[REQUEST_ID_HEADER] = self.request_id
        return web.Response(status=resp.status, body=data, headers=headers)

    # --- streaming ----------------------------------------------------------------------------

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
            if not self.client_stream:
                relay.assemble(events, now)
                if relay.fault is not None:
                    return await self._fail(relay.fault[0], 502, "upstream_error", relay.fault[1])
                if not had_tokens and self.watch.tokens:
                    self._rearm()
                continue
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
            try:
                if self.out is None:
                    self.out = await self._begin()
                if frames:
                    await self.out.write(b"".join(frames))
            except _CLIENT_GONE:
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

    async def _begin(self) -> web.StreamResponse:
        out = web.StreamResponse(status=200, headers=self._up)
        out.headers.setdefault("Content-Type", "text/event-stream")
        out.headers["Cache-Control"] = "no-cache"
        out.headers[REQUEST_ID_HEADER] = self.request_id
        await out.prepare(self.request)
        return out

    # --- endings ------------------------------------------------------------------------------

    async def _ok(self) -> web.StreamResponse:
        finish = {"finish_reason": self.relay.finish}
        if not self.client_stream:
            answer = self.relay.answer()
            await self._end(OK, 200, finish)
            headers = self._up.copy()
            headers.popall("Content-Type", None)  # the stream's type: the answer is JSON
            headers[REQUEST_ID_HEADER] = self.request_id
            return web.Response(
                body=json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode(),
                content_type="application/json",
                headers=headers,
            )
        try:
            if self.out is None:  # an answer without a single token
                self.out = await self._begin()
        except _CLIENT_GONE:
            return await self._client_gone()
        # The row is on disk before the client sees [DONE]: whoever sees the end can read it.
        await self._end(OK, 200, finish)
        try:
            await self.out.write_eof(b"".join(self._held + self._tail))
        except _CLIENT_GONE:
            pass
        return self.out

    def _left(self) -> tuple[str, int | None, dict[str, Any]]:
        """A hung-up client's row: the upstream's in-stream error if one came (the SDK raises on it
        and closes at once), else ok when the answer was whole, else client_disconnect."""
        if self.relay.error is not None:
            outcome, _, message = error_verdict(
                self.relay.error, self.out is not None or self.watch.tokens > 0
            )
            return outcome, 200, {"error": message}
        return (OK if self.relay.done else CLIENT_DISCONNECT), None, {}

    async def _in_stream_error(self) -> web.StreamResponse:
        err = self.relay.error or {}
        outcome, code, message = error_verdict(err, self.out is not None or self.watch.tokens > 0)
        if self.out is not None:
            # Already forwarded as the stream's last data line; the SDK raises on it.
            await self._end(outcome, 200, {"error": message})
            try:
                await self.out.write(b"".join(self._tail))
            except _CLIENT_GONE:
                pass
            cut_short(self.request)  # an incomplete message: curl exits non-zero (http.py)
            return self.out
        if outcome == CLIENT_ERROR:  # the request's own fault, as the server said it
            await self._end(outcome, code, {"error": message})
            return error_response(code, err, self.request_id)
        # The server's failure: never a 4xx, which would tell the client its request was wrong.
        msg = f"upstream sent an error in its stream after {self.watch.tokens} tokens: {message}"
        return await self._fail(outcome, code if code >= 500 else 502, "upstream_error", msg)

    async def _stalled(self) -> web.StreamResponse:
        stall = self.stall
        assert stall is not None
        self.ctx.metrics.stalls.labels(stall.kind).inc()
        return await self._fail(stall.kind, 503, "upstream_stalled", stall.message, stall.detail())

    async def _fail(
        self, outcome: str, status: int, err_type: str, message: str, extra: dict[str, Any] | None = None
    ) -> web.StreamResponse:
        """An infrastructure failure: tell subscribers, write the row, then answer the client;
        unless the life under the request is being replaced and the request goes on there."""
        self._abort_upstream()
        extra = dict(extra or {})
        turn = None if self._no_resume else await self._resumable(outcome, message, extra)
        if turn is not None:
            raise turn
        obj = error_object(err_type, outcome, message)
        if self.out is None:
            await self._end(outcome, status, {"error": message, **extra})
            return error_response(status, obj, self.request_id)
        await self._end(outcome, 200, {"error": message, **extra})
        try:
            await self.out.write(b"".join(self.relay.release()) + self.relay.error_frame(obj))
        except _CLIENT_GONE:
            pass
        cut_short(self.request)  # an incomplete message: curl exits non-zero (http.py)
        return self.out

    # --- resume (resume.py) ----------------------------------------------------------------------

    def _by_ids_here(self) -> bool:
        """Whether this request's server continues a reply from its token ids (the profile's
        ``continuation``), so the ids are asked for as the reply is relayed."""
        router = self.router
        return isinstance(router, Resumable) and router.continuation(self.upstream) == TOKEN_IDS

    async def _resumable(self, outcome: str, message: str, extra: dict[str, Any]) -> _Resume | None:
        """The resume of a request whose life is being replaced, or None (then ``extra`` may say
        why a replaced life's request was not resumed). A stall is resumed only when the verdict
        on its life is in already: one request stuck while its server serves others fails."""
        cfg, router, life = self.ctx.cfg, self.router, self.life
        splice = self.relay.splice if isinstance(self.relay, Relay | TypedRelay) else None
        if splice is not None and splice.departed is not None:
            extra["not_resumed"] = splice.departed  # a replay that is not the reply the client has
            return None
        if (
            cfg.on_wedge != "resume"
            or not isinstance(router, Resumable)
            or life is None
            or self.asked is None
        ):
            return None
        if not self._start_written or not (outcome in RESUMABLE or outcome.startswith(UPSTREAM_HTTP_PREFIX)):
            return None
        self.waiting = False
        within = 0.0 if outcome in STALL_KINDS else cfg.verdict_wait
        if not await router.replacing(life.life_id, within):
            return None
        if self.resumes >= cfg.max_resumes:
            # It met a wedge on every life it reached: a suspect, not something to retry for ever.
            extra.update(suspect=True, not_resumed=f"resumed {self.resumes} time(s) already (max_resumes)")
            return None
        if self.out is None:  # the client has received nothing: the request goes again whole
            return _Resume(outcome, message, extra, self.asked.payload, None)
        if isinstance(self.relay, TypedRelay):
            # A begun Responses or Messages stream: sent again whole too, and replayed up to what
            # the client has (``_turn`` sets the splice; replay.py).
            if self.relay.sent is None:
                extra["not_resumed"] = "what the client received was not kept"
                return None
            return _Resume(outcome, message, extra, self.asked.payload, None)
        sent = self.relay.sent if isinstance(self.relay, Relay) else None
        relayed = Relayed.read(self.kind, sent or [], self.prior_tokens + self.watch.tokens)
        body, why = continuation(self.kind, self.asked.body, relayed, router.continuation(self.upstream))
        if body is None:
            # Text cannot continue it exactly (a tool call or reasoning begun, a server that
            # cannot continue a reply): replayed instead, and held to what the client has.
            refusal = refused(self.asked.body) if sent is not None else why
            if refusal is not None:
                extra["not_resumed"] = refusal
                return None
            return _Resume(outcome, message, extra, self.asked.payload, None)
        payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        return _Resume(outcome, message, extra, payload, relayed)

    async def _turn(self, turn: _Resume) -> bytes | web.StreamResponse:
        """End this leg (its row: ``resumed``, naming the next) and set up the next one on the next
        ready life; the payload to send there, or the failure when no life came."""
        router = self.router
        assert isinstance(router, Resumable) and isinstance(router, Router) and self.life is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._resp is not None:
            self._resp.release()
            self._resp = None
        try:
            await router.after(self.life.life_id, self.ctx.cfg.restart_wait)
        except Exception as exc:  # no life within restart_wait, or the supervisor gave up
            self._no_resume = True  # no second try at resuming
            why = f"no next life: {exc}"
            return await self._fail(
                turn.outcome, 502, "upstream_error", turn.message, {**turn.extra, "not_resumed": why}
            )
        next_id = f"{self.ctx.ids.getrandbits(64):016x}"
        cause = {"cause": turn.outcome, "error": turn.message, **turn.extra, "resumed_as": next_id}
        await self._end(RESUMED, None, cause)
        member = router.route(self.attempt_id)
        router.release(self.upstream)
        self.upstream, self.life = member, member.life()
        self.base_url = member.base_url.rstrip("/")
        self.legs.append(self.request_id)
        self.request_id, self.resumes = next_id, self.resumes + 1
        self.prior_tokens += self.watch.tokens
        self.started_at, self.t0 = time.time(), self.ctx.clock()
        self.watch = Watch(self.ctx.cfg, self.t0, self.ctx.metrics.itl, engine=self.ctx.engine)
        sent = self.relay.sent if isinstance(self.relay, Relay | TypedRelay) else None
        self.relay = make_relay(self.kind, self.watch)
        self.relay.want_usage = self.asked.want_usage if self.asked is not None else False
        if turn.relayed is not None and isinstance(self.relay, Relay):
            self.relay.sent, self.relay.splice = sent, Splice(turn.relayed)
        elif sent is not None and self.out is None:
            self.relay.sent = []  # nothing received: sent again whole, what it relays kept anew
        elif sent is not None:
            # A replay (replay.py): what the client has is swallowed, the rest goes on under the
            # first leg's ids; the list goes on growing with what this leg forwards, for a further
            # resume. The replay's tokens are the whole reply's, so none are counted before it.
            cause = (turn.outcome, turn.message)
            if isinstance(self.relay, TypedRelay):
                self.relay.sent, self.relay.splice = sent, Replay(list(sent), cause)
            elif isinstance(self.relay, Relay):
                self.relay.sent, self.relay.splice = sent, ChatReplay(self.kind, list(sent), cause)
            self.prior_tokens = 0
        self.stall, self._ended, self._start_written = None, False, False
        self._held, self._tail = [], []
        if isinstance(self.relay, Relay):
            self.relay.hide_ids = self.hide_ids
        self.leg_path = None
        if turn.relayed is not None and turn.relayed.by_ids:
            return await self._from_ids(turn.relayed, turn.payload)
        return turn.payload

    async def _from_ids(self, relayed: Relayed, payload: bytes) -> bytes:
        """A continuation from token ids goes to /v1/completions, with the token budget a chat
        request without a limit had (what the next life's context leaves: token_ids.py); by its
        text, as on a server without ids, when that life does not say its context."""
        assert self.asked is not None
        headers = forward_headers(self.request.headers, drop=("accept-encoding", "content-encoding"))
        budgeted = await with_budget(self.ctx.session, self.base_url, headers, payload)
        if budgeted is not None:
            self.leg_path = COMPLETIONS
            return budgeted
        relayed.by_ids = False
        body, _ = continuation(self.kind, self.asked.body, relayed, "continue")
        if body is None:  # the text route refuses what the ids took (a prompt of ids): as it is
            return payload
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    async def _client_gone(self) -> web.StreamResponse:
        self._abort_upstream()
        await self._end(*self._left())
        return self.out or web.Response(status=499)

    async def _end(self, outcome: str, status: int | None, detail: dict[str, Any]) -> None:
        await asyncio.shield(self._record(outcome, status, detail))

    def _record(self, outcome: str, status: int | None, detail: dict[str, Any]) -> asyncio.Future[None]:
        """Publish the request's event, count it, and queue its row (once)."""
        self._ended = True
        self.waiting = False
        watch = self.watch
        life_id = self.life.life_id if self.life is not None else ""  # "": the unsupervised server
        self.ctx.relayed[life_id] = self.ctx.relayed.get(life_id, 0) + watch.tokens
        duration = self.ctx.clock() - self.t0
        m = self.ctx.metrics
        m.requests.labels(outcome).inc()
        if watch.ttft is not None:
            m.ttft.observe(watch.ttft)
        detail = {**detail, **self.arrival.detail()}
        if self.legs:  # a resumed request: the leg this one continues
            detail["resumes"] = self.legs[-1]
        if self.leg_path is not None:  # continued from token ids: a completion (token_ids.py)
            detail["sent_to"] = self.leg_path
        end = Ending(
            request_id=self.request_id,
            attempt_id=self.attempt_id,
            life=self.life,
            path=self.path,
            model=self.model,
            client_stream=self.client_stream,
            started_at=self.started_at,
            watch=watch,
            duration=duration,
            outcome=outcome,
            http_status=status,
            usage=self.relay.usage,
            detail=detail,
            stall=self.stall,
        )
        event = end.event()
        if event is not None:
            self.ctx.bus.publish(event)
        end.log()
        if not self._start_written:
            # Ended before it went upstream (a refused body, no server, the client gone): its start
            # goes with its end, so every end in the ledger has its start.
            self.ctx.sink.submit(self._start_row(), "request_starts")
        return self.ctx.sink.submit(end.row())
