"""How a generation request ends: what its client is answered (a whole answer, the rest of a
stream, an HTTP error, a last error event) and the row it leaves, in that order (the row is on
disk before the client's last byte, so whoever sees the end can read it). ``Answers`` is the base
of ``legs.Legs`` and ``exchange.Exchange``, which set every attribute declared here: one request's
state, read by its endings.

An infrastructure failure (``_fail``) first asks whether the request goes on, on the next life
instead (``_resumable``, ``resume/legs.py``); if so it raises the resume, which the exchange's loop of legs
catches.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from wedgewatch.base.clock import Timer
from wedgewatch.base.protocols import LifeInfo, Router, Upstream
from wedgewatch.base.vocab import (
    CLIENT_DISCONNECT,
    CLIENT_ERROR,
    OK,
    REPLY_NOT_API,
    REPLY_TOO_LARGE,
    upstream_http,
)
from wedgewatch.proxy.arrival import Arrival
from wedgewatch.proxy.body import Asked
from wedgewatch.proxy.deadlines import Stall, Watch
from wedgewatch.proxy.dialects.chat import StreamRelay
from wedgewatch.proxy.dialects.chat_bytes import snippet
from wedgewatch.proxy.dialects.kind import Kind
from wedgewatch.proxy.dialects.whole import output_tokens, summary
from wedgewatch.proxy.ending import Ending
from wedgewatch.proxy.http import REQUEST_ID_HEADER, cut_short, error_object, error_response, forward_headers
from wedgewatch.proxy.replies import error_verdict, read_capped, whole_body
from wedgewatch.proxy.shared import Shared

log = logging.getLogger("wedgewatch.proxy.exchange")  # a request's line reads as the proxy's

CLIENT_GONE = (ConnectionError, aiohttp.ClientConnectionResetError)
_READ_FAILED = (aiohttp.ClientError, OSError, asyncio.TimeoutError)


class Answers:
    """The endings of one request (see the module's docstring)."""

    ctx: Shared
    request: web.Request
    kind: Kind
    path: str
    arrival: Arrival
    attempt_id: str | None
    request_id: str
    started_at: float
    t0: float
    watch: Watch
    upstream: Upstream
    router: Router | None
    life: LifeInfo | None
    base_url: str
    model: str | None
    client_stream: bool
    stall: Stall | None
    relay: StreamRelay
    out: web.StreamResponse | None
    asked: Asked | None
    legs: list[str]
    leg_path: str | None
    waiting: bool
    _held: list[bytes]
    _tail: list[bytes]
    _up: CIMultiDict[str]
    _fetch: asyncio.Future[aiohttp.ClientResponse] | None
    _resp: aiohttp.ClientResponse | None
    _timer: Timer | None
    _ended: bool
    _start_written: bool
    _no_resume: bool
    holding: bool = False  # held for the next life (``legs.Legs``): the client saw no error

    async def _resumable(self, outcome: str, message: str, extra: dict[str, Any]) -> Exception | None:
        """The resume that takes this failure on to the next life, or None (``legs.Legs``)."""
        return None

    async def _quiet(self) -> None:
        """Stop whatever else writes to the client's stream (``legs.Legs``: a held stream's
        keep-alive comments); once it returns, the caller writes alone."""

    def _abort_upstream(self) -> None:
        """Close the upstream connection now: a vLLM request whose client left is aborted."""
        if self._resp is not None:
            self._resp.close()
        elif self._fetch is not None:
            self._fetch.cancel()

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

    async def _whole(self, resp: aiohttp.ClientResponse) -> web.StreamResponse:
        """A whole answer: the one a non-streaming client asked for (its request went upstream
        as sent), or one a server sent a streaming client though it asked for a stream. It goes
        back as the server gave it (status, body, headers) when it is the API's answer; anything
        else (an HTML page, text, other JSON) is the server's fault. Its usage makes the row."""
        try:
            data = await read_capped(resp, self.ctx.cfg.max_body_bytes)
        except _READ_FAILED:
            if self.stall is not None:
                return await self._stalled()
            raise
        if self.stall is not None:  # the deadline passed as the body ended
            return await self._stalled()
        if data is None:
            return await self._fail(REPLY_TOO_LARGE, 502, "upstream_error", self._too_large("a body"))
        obj, fault = whole_body(self.kind, resp.headers.get("Content-Type", ""), data, self.client_stream)
        if fault is not None or obj is None:
            outcome, message = fault or (REPLY_NOT_API, "no answer")
            return await self._fail(outcome, 502, "upstream_error", message)
        self.relay.done = True
        self.relay.usage, finish = summary(self.kind, obj)
        self.watch.answered(output_tokens(self.relay.usage))
        detail: dict[str, Any] = {"finish_reason": finish}
        if self.client_stream:
            detail["upstream_streamed"] = False
        await self._end(OK, resp.status, detail)
        headers = forward_headers(resp.headers, drop=("content-encoding",))
        headers[REQUEST_ID_HEADER] = self.request_id
        return web.Response(status=resp.status, body=data, headers=headers)

    async def _begin(self) -> web.StreamResponse:
        out = web.StreamResponse(status=200, headers=self._up)
        out.headers.setdefault("Content-Type", "text/event-stream")
        out.headers["Cache-Control"] = "no-cache"
        out.headers[REQUEST_ID_HEADER] = self.request_id
        await out.prepare(self.request)
        return out

    async def _ok(self) -> web.StreamResponse:
        finish = {"finish_reason": self.relay.finish}
        try:
            if self.out is None:  # an answer without a single token
                self.out = await self._begin()
        except CLIENT_GONE:
            return await self._client_gone()
        # The row is on disk before the client sees [DONE]: whoever sees the end can read it.
        await self._end(OK, 200, finish)
        try:
            await self.out.write_eof(b"".join(self._held + self._tail))
        except CLIENT_GONE:
            pass
        return self.out

    def _left(self) -> tuple[str, int | None, dict[str, Any]]:
        """A hung-up client's row: the upstream's in-stream error if one came (the SDK raises on it
        and closes at once), else ok when the answer was whole, else client_disconnect (so too a
        request held for the next life: its client never saw the error)."""
        if self.holding:  # held for the next life: the client saw neither the error nor an answer
            return CLIENT_DISCONNECT, None, {}
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
            # Held back (``withheld``) with resume on: unless the request goes on, on the next life,
            # it goes to the client as the server sent it, as its stream's last data line (the SDK
            # raises on it); with resume off it went with the stream.
            extra: dict[str, Any] = {}
            said = f"upstream sent an error in its stream after {self.watch.tokens} tokens: {message}"
            turn = None if self._no_resume else await self._resumable(outcome, said, extra)
            if turn is not None:
                raise turn
            await self._end(outcome, 200, {"error": message, **extra})
            try:
                await self.out.write(b"".join(self.relay.withheld + self._tail))
            except CLIENT_GONE:
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
        except CLIENT_GONE:
            pass
        cut_short(self.request)  # an incomplete message: curl exits non-zero (http.py)
        return self.out

    async def _client_gone(self) -> web.StreamResponse:
        self._abort_upstream()
        await self._end(*self._left())
        return self.out or web.Response(status=499)

    async def _end(self, outcome: str, status: int | None, detail: dict[str, Any]) -> None:
        await self._quiet()  # before what the ending writes
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
        if self.leg_path is not None:  # continued from token ids: a completion (resume/token_ids.py)
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
