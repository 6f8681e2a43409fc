"""A begun stream held for the next life is kept alive: an SSE comment line every
``keepalive_interval`` seconds, from the moment it is held until the next leg's first byte goes to
the client (docs/proxy.md, "What is resumed, what waits").

A held stream says nothing for as long as the next life takes to start, minutes on a large model,
and a client with a read timeout shorter than that gives up on a stream that would have gone on.
A comment line (``: ...``) is ignored by every SSE parser (the WHATWG event-stream rules; the
OpenAI and Anthropic SDKs, aiohttp and httpx readers skip it) but is a byte on the wire, which is
all a read timeout waits for. Comments go only between events: the keep-alive writes while no
leg does, and the exchange stops it (``stop``) before it writes anything else.

What it cannot do: a client that did not ask for a stream has had no headers, so nothing can be
sent it before its answer; a client with a total deadline (aiohttp's ``ClientTimeout(total=300)``
by default, an Inspect attempt's timeout) counts from its request, whatever arrives meanwhile.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from wedgewatch.base.clock import Clock

LINE = b": wedgewatch: held for the next server life\n\n"
"""The comment sent: one comment line and the blank line that ends an SSE event block."""


class KeepAlive:
    """The comments of one held stream (``start`` when it is held, ``stop`` before any other
    write); ``sent`` counts them for the request's row."""

    def __init__(self, clock: Clock, interval: float) -> None:
        self.clock = clock
        self.interval = interval  # 0: off
        self.sent = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self, out: web.StreamResponse) -> None:
        """Begin (once) writing a comment to ``out`` now and every ``interval`` seconds."""
        if self.interval > 0 and self._task is None:
            self._task = asyncio.ensure_future(self._run(out))

    async def _run(self, out: web.StreamResponse) -> None:
        while True:
            try:
                await out.write(LINE)
            except (ConnectionError, RuntimeError):
                return  # the client went away (or the response ended): nothing to keep
            self.sent += 1
            await self.clock.sleep(self.interval)

    async def stop(self) -> None:
        """End the comments; once this returns none is being written."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise  # our own cancellation, not the comments'

    def cancel(self) -> None:
        """End the comments without waiting (the client has gone)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
