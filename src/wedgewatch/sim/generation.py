"""One generation request, from arrival to its last byte: queue, chunked prefill, tokens,
preemption, faults (the scheduler's side is ``sched.py``).

Each request is one asyncio task (aiohttp's handler task) with one timer at a time. The chunks
are encoded before the first token; when the event loop falls behind, every token that is due
goes out in one write, so a busy simulator slows its wall-clock rate gracefully instead of
piling up timers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from wedgewatch.sim import broken, death
from wedgewatch.sim.anthropic import AnthropicEncoder
from wedgewatch.sim.chunks import PING, ChatEncoder, CompletionEncoder, Encoder, Reply
from wedgewatch.sim.engine import Engine
from wedgewatch.sim.parse import GenRequest
from wedgewatch.sim.responses import ResponsesEncoder
from wedgewatch.sim.scenario import Fault
from wedgewatch.sim.sched import Ticket

log = logging.getLogger(__name__)

_BOUNDARY_ACTIONS = (
    "stall_after",
    "drop",
    "crash",
    "wedge",
    "livelock",
    death.ENGINE_DEATH,
    *broken.REPLY_ACTIONS,
)
_ENCODERS: dict[str, Callable[[GenRequest, Reply], Encoder]] = {
    "chat": lambda req, reply: ChatEncoder(req.model, reply),
    "completion": lambda req, reply: CompletionEncoder(req.model, reply),
    "responses": lambda req, reply: ResponsesEncoder(req.model, reply),
    "messages": lambda req, reply: AnthropicEncoder(req.model, reply, req.prompt_tokens),
}


class Generation:
    def __init__(
        self,
        engine: Engine,
        request: web.Request,
        req: GenRequest,
        reply: Reply,
        fault: Fault | None,
        arrived: float,
    ) -> None:
        self.e = engine
        self.request = request
        self.req = req
        self.reply = reply
        self.fault = fault
        self.arrived = arrived
        self.loop = asyncio.get_running_loop()
        self.enc = _ENCODERS[req.kind](req, reply)
        self.resp: web.StreamResponse | None = None
        self.ping = engine.ping
        self.last_write = arrived
        self.kv = 0  # KV tokens held (the scheduler's Owner protocol)
        self.holding = False
        self.preempted = False
        self.decoding = False
        self.ticket: Ticket | None = None
        self.sent = 0  # tokens emitted so far
        self.outcome = "aborted"
        self.tokens = 0  # sent so far
        self.struck = False  # recorded in the fault log

    def resume_need(self) -> int:
        return self.req.prompt_tokens + self.sent

    async def run(self) -> web.StreamResponse:
        e, st = self.e, self.e.stats
        st.in_flight += 1
        inner = asyncio.ensure_future(self._run())
        e.live.add(inner)
        try:
            return await inner
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if e.dead_at is None or (task is not None and task.cancelling()):
                raise  # the client went away (aiohttp cancels its handler)
            self._note(death.ENGINE_DEATH)  # the engine died under it
            return await death.answer(self.request, self.resp, self.req.kind)
        finally:
            e.live.discard(inner)
            st.in_flight -= 1
            if self.outcome == "completed":
                st.completed += 1
            elif self.outcome == "dropped":
                st.dropped += 1
            elif self.outcome == "broken":
                st.broken += 1
            else:
                st.aborted += 1
                e.m.success["abort"] += 1
            e.sched.release(self)

    async def _run(self) -> web.StreamResponse:
        e, req, m = self.e, self.req, self.e.m
        if self.fault is not None and self.fault.action == broken.HTML_200:
            self._note(broken.HTML_200)  # a gateway's page in place of any answer
            self.outcome = "broken"
            return broken.html_page()
        if req.stream:
            self.resp = web.StreamResponse(
                headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
            )
            await self.resp.prepare(self.request)
            role = self.enc.role_chunk()
            if role:
                await self._write(role)
        cached = e.cached_tokens(req.prefix_keys, req.prompt_tokens)
        # Admitted once its first chunk fits, as vLLM schedules chunk by chunk.
        await self._acquire(min(req.prompt_tokens - cached, e.chunk_tokens))
        n = len(self.reply.units)
        wedge_at = e.admit(req.adapter, n)
        wedge_prefill = None
        if self.fault is not None and self.fault.action == "wedge_in_prefill":
            wedge_prefill = self.fault.after_tokens or (req.prompt_tokens - cached) // 2
        await self._prefill(req.prompt_tokens - cached, wedge_prefill)
        m.prompt_tokens += req.prompt_tokens
        m.prefix_queries += req.prompt_tokens if e.opts.prefix_caching else 0
        m.prefix_hits += cached
        e.remember_prefixes(req.prefix_keys)
        e.sched.start_decoding(self)

        stop_at, action, rate = n, "", e.token_rate
        f = self.fault
        if f is not None:
            if f.action == "stall_ttft":
                stop_at, action = 0, "stall"
            elif f.action in _BOUNDARY_ACTIONS:
                stop_at, action = min(f.after_tokens, max(n - 1, 0)), f.action
            elif f.action == "trickle":
                rate = f.rate * e.scale
                self._note("trickle")
        if wedge_at is not None and wedge_at < stop_at:
            stop_at, action = wedge_at, "stochastic_wedge"
        await self._emit(stop_at, rate)
        if action in broken.REPLY_ACTIONS:
            self._note(action)
            self.outcome = "broken"
            body = b"" if self.resp is not None else json.dumps(self.enc.body(req.prompt_tokens)).encode()
            return await broken.strike(action, self.request, self.resp, req.kind, body)
        if action:
            await self._strike(action)

        self.outcome = "completed"
        m.success["length" if self.reply.finish_reason == "length" else "stop"] += 1
        if self.resp is None:
            return web.json_response(self.enc.body(req.prompt_tokens))
        await self.resp.write(self.enc.tail(req.prompt_tokens, n, req.include_usage))
        await self.resp.write_eof()
        return self.resp

    async def _write(self, data: bytes) -> None:
        assert self.resp is not None
        await self.resp.write(data)
        self.last_write = self.loop.time()

    async def _acquire(self, need: int) -> None:
        if self.ping is None or self.resp is None:
            await self.e.sched.acquire(self, need)
            return
        await self._pinging(self.e.sched.acquire(self, need))

    async def _pinging(self, coro: Coroutine[Any, Any, None]) -> None:
        """Wait for ``coro``, sending ``: ping`` comments meanwhile."""
        task = asyncio.ensure_future(coro)
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=self.ping)
                if not task.done():
                    await self._write(PING)
        finally:
            if not task.done():
                task.cancel()
        task.result()

    async def _requeue(self) -> None:
        """Preempted: wait at the front of the queue, then prefill everything again."""
        if self.ping is None or self.resp is None:
            await self.e.sched.resume(self)
        else:
            await self._pinging(self.e.sched.resume(self))
        await self._prefill(self.req.prompt_tokens + self.sent, None)
        self.e.sched.start_decoding(self)

    async def _prefill(self, tokens: int, wedge_after: int | None) -> None:
        """``tokens`` of prefill in chunks of ``max_num_batched_tokens``, the KV of each chunk
        allocated as it is scheduled; a preemption starts it over (recompute)."""
        e = self.e
        done = 0
        while done < tokens:
            chunk = min(e.chunk_tokens, tokens - done)
            e.sched.grow(self, chunk)
            if self.preempted:
                await e.sched.resume(self)
                tokens, done = self.req.prompt_tokens + self.sent, 0
                continue
            await self._sleep_until(self.loop.time() + chunk / e.prefill_rate)
            if e.wedged:
                await self._stall()
            if self.preempted:  # another request's allocation sent us back meanwhile
                await e.sched.resume(self)
                tokens, done = self.req.prompt_tokens + self.sent, 0
                continue
            done += chunk
            if wedge_after is not None and done >= wedge_after:
                e.wedge("scripted", self.fault.gauges if self.fault is not None else "frozen")
                await self._stall()

    async def _sleep_until(self, deadline: float) -> None:
        """Wait, sending ``: ping`` comments on a stream when --sse-ping-interval is set."""
        if self.ping is None or self.resp is None:
            if math.isinf(deadline):
                await self.loop.create_future()  # until the client goes away
            await asyncio.sleep(deadline - self.loop.time())
            return
        while True:
            now = self.loop.time()
            next_ping = self.last_write + self.ping
            if deadline <= next_ping:
                await asyncio.sleep(deadline - now)
                return
            await asyncio.sleep(next_ping - now)
            await self._write(PING)

    def _note(self, action: str) -> None:
        if not self.struck:
            self.struck = True
            self.e.record_fault(action, self.req.messages, self.tokens)

    async def _stall(self) -> None:
        # A request the wedged (or livelocked) server holds; the striking one was noted first.
        self._note("livelocked" if self.e.livelocked and not self.e.wedged else "wedged")
        await self._sleep_until(math.inf)

    async def _emit(self, stop: int, rate: float) -> None:
        """Send units [0, stop) at ``rate`` per second, the first one right after prefill."""
        if stop <= 0:
            return
        e, m, st = self.e, self.e.m, self.e.stats
        chunks = self.enc.unit_chunks() if self.resp is not None else None
        loop, interval = self.loop, 1.0 / rate
        t_next = t_prev = loop.time()
        i = 0
        while i < stop:
            now = loop.time()
            if now < t_next:
                await self._sleep_until(t_next)
                now = loop.time()
            if e.wedged or e.livelocked:
                await self._stall()
            if self.preempted:
                await self._requeue()
                now = t_next = t_prev = loop.time()
            k = min(stop - i, 1 + int((now - t_next) * rate))
            if chunks is not None:
                await self._write(chunks[i] if k == 1 else b"".join(chunks[i : i + k]))
            m.generation_tokens += k
            self.sent += k
            e.sched.grow(self, k)
            st.tokens_generated += k
            if i == 0:
                m.ttft.observe(now - self.arrived)
                if k > 1:
                    m.itl.observe(0.0, k - 1)
            else:
                m.itl.observe((now - t_prev) / k, k)
            t_prev = now
            i += k
            self.tokens = i
            t_next += k * interval

    async def _flush(self) -> None:
        tr = self.request.transport
        for _ in range(400):
            if tr is None or tr.is_closing() or tr.get_write_buffer_size() == 0:
                return
            await asyncio.sleep(0.005)

    def _close_sockets(self) -> None:
        """Refuse new connections and end this one now, not when the loop next runs."""
        if self.e.listener is not None:
            self.e.listener.close()
        sock = self.request.transport.get_extra_info("socket") if self.request.transport else None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)

    async def _strike(self, action: str) -> None:
        """Apply a fault at its boundary; never returns (the request ends by cancellation)."""
        fault = self.fault
        self._note(action)
        if action == "wedge" or action == "stochastic_wedge":
            if action == "wedge":
                self.e.wedge("scripted", fault.gauges if fault is not None else "frozen")
                if fault is not None and fault.ignore_sigterm:  # replaces the handler that stops
                    self.loop.add_signal_handler(signal.SIGTERM, log.warning, "sim: SIGTERM ignored (wedged)")
            else:
                self.e.wedge("stochastic")
        elif action == "livelock":
            self.e.livelock()
        elif action == death.ENGINE_DEATH:
            await self._flush()
            self.e.die(
                fault.exit_code if fault is not None else 1, fault.exit_delay / self.e.scale if fault else 0.0
            )
        elif action == "drop":
            await self._flush()
            self.outcome = "dropped"
            if self.request.transport is not None:
                self.request.transport.close()
            log.warning("fault: dropped a connection after %d tokens", fault.after_tokens if fault else 0)
        elif action == "crash":
            await self._flush()
            code = fault.exit_code if fault is not None else 1
            delay = fault.exit_delay / self.e.scale if fault is not None else 0.0
            if fault is not None and fault.error_event and self.resp is not None:
                # vLLM #48966: the stream ends with the engine's error, then the process exits.
                await self._write(broken.error_event(self.req.kind))
                await self.resp.write_eof()
                await self._flush()
            log.error("fault: crashing with exit code %d in %.3f s", code, delay)
            for h in logging.getLogger().handlers:
                h.flush()
            sys.stderr.flush()
            if delay:
                self._close_sockets()
                time.sleep(delay)  # blocks the loop: a dying process answers nothing
            os._exit(code)
        await self._stall()
