"""A spare life (``server.standby = 1``): the next life, started, ready and warmed beside the serving
one, so that a restart is a promotion, not a start.

The supervisor asks three things of it. ``keep()`` after every life it makes ready: a spare is
started then, never while another life of this server is starting (two engines loading at once
would share the machine's cores and write into the one compile cache at the same moment), and is
watched while it waits (a spare that dies is recorded as a crash and replaced). ``take()`` when a
restart or a planned recycle is due: the ready spare, woken first if it sleeps, or the one still
starting once it is ready (it is the nearest life there is), or None (then the supervisor starts a
life as it would without a spare). ``stop()`` ends it.

Where the spare's engine gets its memory and cores is said once, at start (room.py): where two
engines do not fit, the spare is refused and the line says why. On vLLM's CPU build two engines get
the two halves of this process's CPUs (``VLLM_CPU_OMP_THREADS_BIND``): each new life takes the half
the other live one does not hold. With ``standby_sleep`` (vLLM on a GPU) the spare is put to sleep
once warmed (level 1) and woken when taken; its dev routes need ``VLLM_SERVER_DEV_MODE=1``.

A spare that fails to start is retried with the restart backoff, and after
``max_same_start_failures`` failures in a row the standby is turned off for the run (the serving
life is not touched: the standby is an optimisation, never a reason to fail).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Protocol

import aiohttp

from wedgewatch.base import redact
from wedgewatch.base.clock import Clock
from wedgewatch.base.errors import PortBusyError, ServerStartError, WarmupError
from wedgewatch.base.events import Crashed, EventBus, ServerReady, StandbyRoom, StartFailed, WarmupFailed
from wedgewatch.base.vocab import CRASH, PORT_BUSY, SPARE, STOP
from wedgewatch.config import ServerConfig
from wedgewatch.supervisor import room
from wedgewatch.supervisor.life import Life
from wedgewatch.supervisor.policy import BACKOFF_CAP
from wedgewatch.supervisor.process import log_tail
from wedgewatch.supervisor.start import Starter

log = logging.getLogger(__name__)

SLEEP_FLAG = "--enable-sleep-mode"
DEV_MODE = {"VLLM_SERVER_DEV_MODE": "1"}
"""vLLM opens ``/sleep``, ``/wake_up`` and ``/is_sleeping`` only in its dev mode."""
SLEEP_TIMEOUT = 120.0
"""Seconds a sleep or a wake-up may take (moving a 35B model's weights between host and device)."""


class Host(Protocol):
    """What the spare needs of its supervisor."""

    cfg: ServerConfig
    starter: Starter
    bus: EventBus
    clock: Clock

    @property
    def stopping(self) -> bool: ...

    @property
    def current(self) -> Life | None: ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]: ...

    async def end(self, life: Life, reason: str) -> None: ...


class Standby:
    """One server's spare life (see the module's docstring)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.cfg = host.cfg
        self.spare: Life | None = None  # started; ready once ``spare.ready``
        self.task: asyncio.Task[None] | None = None  # bringing a spare up, then watching it
        self.room: room.Room | None = None
        self.off = False  # refused at start, or given up on
        self._changed = asyncio.Event()  # the spare became ready, or failed

    # --- at start ------------------------------------------------------------------------------

    async def check(self, machine: room.Machine | None = None) -> room.Room:
        """Whether memory holds two engines; publishes the verdict and says it in the log."""
        found = await asyncio.to_thread(room.check, self.cfg, machine)
        self.room = found
        self.off = not found.on
        self.host.bus.publish(
            StandbyRoom(member=self.cfg.name, on=found.on, line=found.line, figures=found.figures)
        )
        # Said whatever the verdict (the CLI shows warnings): which memory, which cores, or why not.
        log.warning("%s", found.line)
        return found

    def env(self) -> dict[str, str]:
        """The environment of a new life of this server: the CPUs no other live life holds."""
        cores = self.room.cores if self.room is not None and not self.off else None
        if cores is None:
            return {}
        held = {life.cores for life in (self.host.current, self.spare) if life is not None and not life.ended}
        free = next((c for c in cores if c not in held), cores[0])
        return {room.BIND_ENV: free}

    # --- keeping a spare -------------------------------------------------------------------------

    def keep(self) -> None:
        """Start a spare unless there is one, one is starting, or the standby is off."""
        if self.off or self.host.stopping or self.spare is not None:
            return
        if self.task is not None and not self.task.done():
            return
        self.task = self.host.spawn(self._keep())

    async def _keep(self) -> None:
        failures = 0
        while not (self.off or self.host.stopping):
            await self._serving()
            if self.off or self.host.stopping:
                return
            life = self._launch()
            self.spare = life
            self._changed.set()
            try:
                await self.host.starter.await_ready(life)
                await self.host.starter.warm_up(life)
            except PortBusyError:
                await self._drop(life, PORT_BUSY)  # someone took the auto-picked port: another
                continue
            except (ServerStartError, WarmupError) as exc:
                failed = WarmupFailed if isinstance(exc, WarmupError) else StartFailed
                self.host.bus.publish(
                    failed(
                        member=self.cfg.name, life_id=life.life_id, error=str(exc)[-2000:], warmup=life.warmup
                    )
                )
                await self._drop(life, failed.kind)
                failures += 1
                if failures >= self.cfg.max_same_start_failures:
                    self.off = True
                    self._changed.set()
                    log.warning("no spare life: %d starts failed in a row, the last: %s", failures, exc)
                    return
                await self.host.clock.sleep(min(BACKOFF_CAP, self.cfg.restart_backoff * 2 ** (failures - 1)))
                continue
            except BaseException:
                await asyncio.shield(self._drop(life, STOP))
                raise
            failures = 0
            if self.cfg.standby_sleep:
                await self._sleep(life)
            life.ready, life.ready_at = True, self.host.clock()
            self.host.bus.publish(
                ServerReady(
                    member=self.cfg.name,
                    life_id=life.life_id,
                    base_url=life.base_url,
                    ready_seconds=round(life.ready_at - life.started, 4),
                    warmup=life.warmup,
                )
            )
            self._changed.set()
            if not await self._watch(life):
                return  # taken
            # It died waiting: recorded, ended; the next one starts at once.

    def _launch(self) -> Life:
        args = (SLEEP_FLAG,) if self.cfg.standby_sleep else ()
        env = {**self.env(), **(DEV_MODE if self.cfg.standby_sleep else {})}
        life = self.host.starter.launch(SPARE, env=env, args=args)
        life.cores = env.get(room.BIND_ENV)
        return life

    async def _serving(self) -> None:
        """Return once the serving life is ready: a spare never starts beside a starting life."""
        while not (self.off or self.host.stopping):
            life = self.host.current
            if life is not None and life.ready and not life.ended:
                return
            await self.host.clock.sleep(self.cfg.scrape_interval)

    async def _watch(self, life: Life) -> bool:
        """Poll the waiting spare's process; True when it died (recorded and ended), False once
        it was taken or the standby stopped."""
        while self.spare is life and not self.host.stopping:
            code = life.proc.poll()
            if code is not None:
                await self._died(life, code)
                return True
            await self.host.clock.sleep(self.cfg.scrape_interval)
        return False

    async def _died(self, life: Life, code: int) -> None:
        life.crashed = True
        tail = redact.text(log_tail(life.log_path)) if life.log_path else ""
        self.host.bus.publish(
            Crashed(member=self.cfg.name, life_id=life.life_id, exit_code=code, log_tail=tail)
        )
        log.warning("spare life %s exited with code %s", life.life_id, code)
        await self._drop(life, CRASH)

    async def _drop(self, life: Life, reason: str) -> None:
        """End a spare that failed or died, then let go of it: a life started in its place (by
        ``take``'s caller) starts after its end, never beside it."""
        try:
            await self.host.end(life, reason)
        finally:
            if self.spare is life:
                self.spare = None
            self._changed.set()

    # --- promotion --------------------------------------------------------------------------------

    def ready(self) -> bool:
        """A spare is ready and alive now."""
        s = self.spare
        return s is not None and s.ready and not s.ended and s.proc.poll() is None

    def coming(self) -> bool:
        """A spare is ready or starting (``take`` would wait for it)."""
        return not self.off and self.spare is not None and not self.spare.ended

    async def arrival(self) -> bool:
        """Wait until a spare is ready or starting (one starts once the life it replaced last has
        retired); False when the standby is off, or stopping."""
        while not (self.off or self.host.stopping):
            if self.coming():
                return True
            self._changed.clear()
            await self._changed.wait()
        return False

    async def take(self) -> tuple[Life, float | None] | None:
        """The spare for promotion, detached (the keeper lets it go), with the seconds its wake-up
        took (None: it was awake); a spare still starting is waited for. None: no spare, or it
        died or failed (then the caller starts a life itself)."""
        while True:
            life = self.spare
            if self.off or life is None or self.host.stopping:
                return None
            if life.ready:
                break
            self._changed.clear()
            await self._changed.wait()
        code = life.proc.poll()
        if code is not None:
            await self._died(life, code)
            return None
        self.spare = None
        woke = await self._wake(life) if life.asleep else None
        if life.asleep:  # it would not wake: no life to promote
            await self.host.end(life, STOP)
            return None
        return life, woke

    async def stop(self) -> None:
        """End the spare (the supervisor stops its background tasks first)."""
        life, self.spare = self.spare, None
        if life is not None:
            await self.host.end(life, STOP)

    # --- vLLM's sleep mode -----------------------------------------------------------------------

    async def _sleep(self, life: Life) -> None:
        """Level 1: weights to host memory, KV cache freed. A spare that will not sleep stays
        awake (said in the log): promotion then skips the wake-up."""
        ok = await self._call(life, "POST", "/sleep?level=1") and await self._sleeping(life) is True
        life.asleep = ok
        if not ok:
            log.warning("spare life %s did not go to sleep; it waits awake", life.life_id)

    async def _wake(self, life: Life) -> float:
        t0 = self.host.clock()
        if await self._call(life, "POST", "/wake_up") and await self._sleeping(life) is False:
            life.asleep = False
        else:
            log.error("spare life %s did not wake up", life.life_id)
        return round(self.host.clock() - t0, 4)

    async def _sleeping(self, life: Life) -> bool | None:
        session = self.host.starter.session
        if session is None:
            return None
        try:
            async with (
                asyncio.timeout(SLEEP_TIMEOUT),
                session.get(life.base_url + "/is_sleeping", headers=self.host.starter.headers) as resp,
            ):
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            return None
        value = body.get("is_sleeping") if isinstance(body, dict) else None
        return value if isinstance(value, bool) else None

    async def _call(self, life: Life, method: str, path: str) -> bool:
        session = self.host.starter.session
        if session is None:
            return False
        try:
            async with (
                asyncio.timeout(SLEEP_TIMEOUT),
                session.request(method, life.base_url + path, headers=self.host.starter.headers) as resp,
            ):
                await resp.read()
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False
