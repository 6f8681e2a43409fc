"""The simulated scheduler: slots, the FIFO queue, KV blocks, preemption and engine steps.

Modelled on vLLM v1's scheduler (``vllm/v1/core/sched/scheduler.py``): requests run first come,
first served up to ``--max-num-seqs``; KV is allocated as a prefill chunk is scheduled and as each
token is decoded; when the KV cache is full the most recently admitted running request is
preempted: its KV is freed, it goes to the *front* of the waiting queue (counted in
``num_requests_waiting``), its stream is silent, and when it is admitted again it prefills its
prompt and the tokens it already sent anew (recompute). Nothing is admitted while the request at
the head of the queue does not fit.

Engine steps are counted lazily: while any request is past its prefill the engine makes one step
per decode interval (``1 / tokens_per_s``), each with one token per such request, observed into
``vllm:iteration_tokens_total`` as vLLM observes a step with outputs. A step that only prefills
emits nothing and is not observed (vLLM's output handler records iteration stats only for steps
with outputs); the KV usage still moves with every chunk.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol


class _Histogram(Protocol):
    def observe(self, v: float, n: int = 1) -> None: ...


class Counters(Protocol):
    """The engine's counters this module moves (``engine.Counters``)."""

    running: int
    waiting: int
    kv_tokens: int
    preemptions: int
    steps: int

    @property
    def iteration(self) -> _Histogram: ...


class Owner(Protocol):
    """What the scheduler keeps of one request (a ``Generation``)."""

    kv: int
    holding: bool
    preempted: bool
    decoding: bool
    ticket: Ticket | None

    def resume_need(self) -> int: ...


class Ticket:
    __slots__ = ("fut", "need", "owner")

    def __init__(self, fut: asyncio.Future[None], need: int, owner: Owner) -> None:
        self.fut = fut
        self.need = need
        self.owner = owner


class Scheduler:
    def __init__(
        self, m: Counters, max_num_seqs: int, capacity: int, step_rate: float, clock: _Clock
    ) -> None:
        self.m = m
        self.max_num_seqs = max_num_seqs
        self.capacity = capacity
        self.step_rate = step_rate  # engine steps per second while anything decodes
        self.clock = clock
        self.running: list[Owner] = []  # admission order: the last one is preempted first
        self._queue: deque[Ticket] = deque()
        self._decoding = 0
        self._since = 0.0
        self._carry = 0.0

    # --- steps -------------------------------------------------------------------------------

    def flush(self) -> None:
        """Count the steps made since the last change (called on every change and every scrape)."""
        now = self.clock()
        if self._decoding > 0:
            self._carry += (now - self._since) * self.step_rate
            n = int(self._carry)
            if n:
                self._carry -= n
                self.m.steps += n
                self.m.iteration.observe(self._decoding, n)
        self._since = now

    def start_decoding(self, o: Owner) -> None:
        if not o.decoding:
            self.flush()
            o.decoding = True
            self._decoding += 1

    def stop_decoding(self, o: Owner) -> None:
        if o.decoding:
            self.flush()
            o.decoding = False
            self._decoding -= 1

    # --- slots and queue ----------------------------------------------------------------------

    def _fits(self, need: int) -> bool:
        return not self.running or self.m.kv_tokens + need <= self.capacity

    def _admit(self, o: Owner) -> None:
        self.m.running += 1
        o.holding = True
        self.running.append(o)

    def _pump(self) -> None:
        while self._queue and self.m.running < self.max_num_seqs:
            t = self._queue[0]
            if t.fut.done():
                self._queue.popleft()
                continue
            if not self._fits(t.need):
                break
            self._queue.popleft()
            self.m.waiting -= 1
            self._admit(t.owner)
            t.owner.ticket = None
            t.fut.set_result(None)

    async def acquire(self, o: Owner, need: int) -> None:
        """A running slot, in FIFO order, once ``need`` KV tokens fit."""
        if self.m.running < self.max_num_seqs and not self._queue and self._fits(need):
            self._admit(o)
            return
        t = Ticket(asyncio.get_running_loop().create_future(), need, o)
        self._queue.append(t)
        self.m.waiting += 1
        o.ticket = t
        await self._wait(t)

    async def resume(self, o: Owner) -> None:
        """Back to running after a preemption (its ticket is at the front of the queue)."""
        t = o.ticket
        if t is not None:
            await self._wait(t)
        o.preempted = False

    async def _wait(self, t: Ticket) -> None:
        try:
            await t.fut
        except BaseException:
            if t.fut.done() and not t.fut.cancelled():
                self.release(t.owner)  # the slot was handed over just as we were cancelled
            elif t in self._queue:
                self._queue.remove(t)
                self.m.waiting -= 1
                t.owner.ticket = None
            raise

    def release(self, o: Owner) -> None:
        """The request ended: its slot (if it holds one), its KV and its queue place go."""
        if o.holding:
            self.stop_decoding(o)
            o.holding = False
            self.m.running -= 1
            self.running.remove(o)
        t = o.ticket
        if t is not None and t in self._queue:
            self._queue.remove(t)
            self.m.waiting -= 1
            o.ticket = None
        self.m.kv_tokens -= o.kv
        o.kv = 0
        self._pump()

    # --- KV and preemption --------------------------------------------------------------------

    def grow(self, o: Owner, n: int) -> None:
        """Allocate ``n`` KV tokens for ``o``; preempt the latest admitted requests until the
        cache fits again (never the only running one: it has nowhere to go)."""
        self.m.kv_tokens += n
        o.kv += n
        while self.m.kv_tokens > self.capacity and len(self.running) > 1:
            victim = self.running[-1]
            self._preempt(victim)
            if victim is o:
                break
        self._pump()

    def _preempt(self, v: Owner) -> None:
        self.stop_decoding(v)
        self.running.remove(v)
        v.holding = False
        self.m.running -= 1
        self.m.kv_tokens -= v.kv
        v.kv = 0
        v.preempted = True
        self.m.preemptions += 1
        t = Ticket(asyncio.get_running_loop().create_future(), v.resume_need(), v)
        self._queue.appendleft(t)
        self.m.waiting += 1
        v.ticket = t


class _Clock(Protocol):
    def __call__(self) -> float: ...
