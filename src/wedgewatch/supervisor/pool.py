"""A pool of supervised servers (``[[servers]]``) behind one proxy; one ``[server]`` is a pool of
one.

Each member is a ``Supervisor`` of its own: its own lives, wedge detection, restarts and restart
budget, so a wedge on one member restarts that member while the others keep serving. The pool
only chooses. A request goes to a ready member (one with a life that is up, warmed and not about
to be restarted): the member its attempt was sent to before while that one is ready, so an agent's
growing prefix stays in one server's prefix cache, else the ready member with the fewest requests
in flight. An attempt is bound to its member when it starts (``bind``), so its ledger row names
the life it runs on and a restart of that member ends exactly the attempts it holds.

Implements the proxy's ``Router`` (and so ``Upstream``/``Replaceable``) and what the runner needs
of its server side (``runner.context.ServerSide``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from wedgewatch.base.events import EventBus
from wedgewatch.base.protocols import LifeInfo, ProxyView, Upstream
from wedgewatch.supervisor.supervisor import Supervisor
from wedgewatch.wire.heartbeat import Feed

log = logging.getLogger(__name__)


class Pool:
    """``Pool([supervisor, ...])``: ``start``/``stop`` every member; route requests among them."""

    def __init__(self, members: Sequence[Supervisor]) -> None:
        if not members:
            raise ValueError("a pool needs at least one member")
        self.members = list(members)
        self._inflight = {id(m): 0 for m in self.members}  # requests the proxy has on each
        self._sticky: dict[str, Supervisor] = {}  # tag (attempt id) -> the member it went to
        self._busy: Callable[[str | None], int] = lambda _life_id: 0
        # One heartbeat feed for the proxy: each member's readings, tagged with its own life id.
        windows = [m.feed.window for m in self.members]
        self.feed = Feed(max(windows), all(m.feed.heartbeat for m in self.members))
        for m in self.members:
            m.feed.subscribe(self.feed.reading, self.feed.stopped)

    # --- Upstream / Replaceable: the pool as a whole ---------------------------------------------

    @property
    def base_url(self) -> str:
        return (self._first(self.takes_work) or self._first(self.serves) or self.members[0]).base_url

    def life(self, attempt_id: str | None = None) -> LifeInfo | None:
        """The life of the member ``attempt_id`` is bound to; else of a member that takes new
        work, else of one still serving (None when no member has a life)."""
        bound = self._sticky.get(attempt_id) if attempt_id is not None else None
        if bound is not None:
            return bound.life()
        member = self._first(self.takes_work) or self._first(self.serves) or self._first(self.has_life)
        return member.life() if member is not None else None

    @property
    def life_id(self) -> str | None:
        info = self.life()
        return info.life_id if info is not None else None

    async def wait_ready(self) -> None:
        """Return once any member's own ``wait_ready`` would (a ready life, no restart decided
        on, not draining; a wedged one too when ``restart_on_wedge`` is off, as on one server);
        raise the first member's error when every member has given up or stopped."""
        if self._first(self.takes_work) is not None:
            return
        waits = {asyncio.ensure_future(m.wait_ready()) for m in self.members}
        errors: list[BaseException] = []
        try:
            while waits:
                done, waits = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    exc = task.exception()
                    if exc is None:
                        return
                    errors.append(exc)
            raise errors[0]
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def wait_failed(self) -> BaseException:
        """Return once no member can serve any more (each gave up, or the pool is stopped)."""
        errors = await asyncio.gather(*(m.wait_failed() for m in self.members))
        return errors[0]

    # --- Router ------------------------------------------------------------------------------------

    def route(self, tag: str | None) -> Upstream:
        # An attempt's requests stay on its member while that one serves, draining included: a
        # planned recycle waits for exactly those requests.
        member = self._sticky.get(tag) if tag is not None else None
        if member is None or not self.serves(member):
            member = self._least_busy()
            if tag is not None:
                self._sticky[tag] = member
        self._inflight[id(member)] += 1
        return member

    def release(self, member: Upstream) -> None:
        key = id(member)
        if key in self._inflight:
            self._inflight[key] = max(0, self._inflight[key] - 1)

    # --- what the proxy's resume needs (base.protocols.Resumable) --------------------------------

    def _replaced(self, life_id: str) -> bool:
        for m in self.members:
            life = m.current
            if life is not None and life.life_id == life_id:
                return life.wedged or life.crashed or life.ended or life.restart_due or m.stopping
        return True  # no member serves it any more: it was replaced (or its member stopped)

    async def _poll(self, done: Callable[[], bool], within: float) -> bool:
        clock = self.members[0].clock
        deadline = clock() + within
        while not done():
            if clock() >= deadline:
                return False
            await clock.sleep(min(0.05, max(0.0, deadline - clock())))
        return True

    async def replacing(self, life_id: str, within: float) -> bool:
        return await self._poll(lambda: self._replaced(life_id), within)

    async def after(self, life_id: str, within: float) -> None:
        def ready() -> bool:
            failed = [m.failure for m in self.members if m.failure is not None]
            if len(failed) == len(self.members):
                raise failed[0]  # every member gave up: no life will come
            return any(self.serves(m) and m.life_id != life_id for m in self.members)

        if not await self._poll(ready, within):
            raise TimeoutError(f"no ready server life within {within:g} s")

    def continuation(self, member: Upstream) -> str | None:
        return member.profile.continuation if isinstance(member, Supervisor) else None

    # --- what the runner needs ----------------------------------------------------------------

    def bind(self, attempt_id: str) -> LifeInfo | None:
        """Send ``attempt_id`` to a member now (the least busy ready one) and return its life: the
        attempt's requests go there while it is ready."""
        member = self._least_busy()
        self._sticky[attempt_id] = member
        return member.life()

    def member_of(self, life_id: str | None) -> Supervisor | None:
        """The member whose current life is ``life_id``."""
        return next((m for m in self.members if life_id is not None and m.life_id == life_id), None)

    def note_attempt(self, api_error: bool, life_id: str | None = None) -> None:
        member = self.member_of(life_id) if life_id is not None else self._first(self.takes_work)
        if member is not None:
            member.note_attempt(api_error, life_id)

    def note_instance_done(self, attempt_id: str | None = None) -> None:
        """An instance is final; its last attempt (``attempt_id``) says which member served it
        (``recycle_every_instances`` counts per member)."""
        member = self._sticky.get(attempt_id) if attempt_id is not None else None
        (member or self.members[0]).note_instance_done()

    async def settle(self, life_id: str | None) -> None:
        member = self.member_of(life_id)
        if member is not None:
            await member.settle(life_id)

    def count_busy(self, busy: Callable[[str | None], int]) -> None:
        """``busy(life_id)``: the attempts in flight on a life; a member's planned recycle waits for
        its own to finish (supervisor/drain.py)."""
        self._busy = busy
        for m in self.members:
            m.busy = lambda m=m: busy(m.life_id)  # type: ignore[misc]

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Every member ready and warmed, started side by side; any failure stops them all."""
        try:
            async with asyncio.TaskGroup() as tg:
                for m in self.members:
                    tg.create_task(m.start())
        except BaseExceptionGroup as group:
            await self.stop()
            raise group.exceptions[0] from None
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        await asyncio.gather(*(m.stop() for m in self.members), return_exceptions=True)

    def see_proxy(self, view: ProxyView) -> None:
        """Let every member's watcher read what the proxy holds on its lives (work and
        movement its server's gauges may not show)."""
        for m in self.members:
            m.watcher.view = view

    def attach(self, bus: EventBus) -> Callable[[], None]:
        """Every member listens to the proxy's events (each hears those of its own lives)."""
        detach = [m.attach(bus) for m in self.members]

        def undo() -> None:
            for d in detach:
                d()

        return undo

    # --- choosing -------------------------------------------------------------------------------

    @staticmethod
    def serves(m: Supervisor) -> bool:
        """The member has a ready life that requests can reach and that was not found wedged."""
        life = m.current
        return life is not None and life.ready and not (life.ended or life.wedged) and not m.stopping

    @classmethod
    def takes_work(cls, m: Supervisor) -> bool:
        """Serving, and taking new work: not draining for a recycle, no restart decided on (the
        member's own ``wait_ready`` says the same)."""
        life = m.current
        return cls.serves(m) and life is not None and not (life.restart_due or life.draining)

    @staticmethod
    def has_life(m: Supervisor) -> bool:
        """Any current life that stays: a wedged one kept when ``restart_on_wedge`` is off (its
        requests then meet the proxy's deadlines, as they would on one server). A wedged life
        whose replacement is coming is no life to send a new request to: the request waits for
        the next one (the proxy's ``restart_wait``) instead of joining the wedge."""
        life = m.current
        return life is not None and not (life.wedged and m.cfg.restart_on_wedge)

    def _first(self, test: Callable[[Supervisor], bool]) -> Supervisor | None:
        return next((m for m in self.members if test(m)), None)

    def _load(self, m: Supervisor) -> int:
        return self._inflight[id(m)] + self._busy(m.life_id)

    def _least_busy(self) -> Supervisor:
        """The member taking new work with the least of it (requests in flight through the
        proxy, plus the runner's attempts bound to it); else the least busy still serving; else
        one with any life; else the first member (a request then waits at the proxy for a ready
        life, or fails)."""
        for test in (self.takes_work, self.serves, self.has_life):
            found = [m for m in self.members if test(m)]
            if found:
                return min(found, key=self._load)  # the first in the config on a tie
        return self.members[0]
