"""The supervisor: a fresh server life, really ready, warmed up, watched, restarted when it wedges.
Long because it is the one object that decides: bringing a life up, promoting a spare in its place
(standby.py keeps the spare; the promotion changes the current life), ending it, and every handler
that restarts it (wedge, crash, API errors, recycle) share one lock and one current life, and read
best side by side.

One asyncio object, in the same loop as the proxy. Bringing a life up and tearing one down are
serialised by a lock; detection (scrapes, canaries, crash checks: ``watcher.Watcher``) runs in
background tasks that only ever *report* on the life they watched, and the handlers here decide,
so a stale alarm cannot kill its successor. Each fact is published as a typed event on the bus,
and ``recorder.Recorder`` writes the ledger's rows from it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp

from wedgewatch.base import redact
from wedgewatch.base.clock import SYSTEM, Clock
from wedgewatch.base.errors import PortBusyError, ServerDown, ServerError, ServerStartError, WarmupError
from wedgewatch.base.events import (
    ApiErrors,
    Crashed,
    Event,
    EventBus,
    GaveUp,
    LifeEnded,
    Promoted,
    Restarting,
    RestartSkipped,
    ServerReady,
    StartFailed,
    WarmupFailed,
    Wedged,
)
from wedgewatch.base.protocols import LifeInfo
from wedgewatch.base.vocab import ADOPTED, CRASH, DETACHED, PORT_BUSY, RUN_START, STOP, WEDGE
from wedgewatch.config import ServerConfig
from wedgewatch.ledger import Ledger
from wedgewatch.supervisor import profiles
from wedgewatch.supervisor.drain import drain, retire
from wedgewatch.supervisor.evidence import capture as capture_evidence
from wedgewatch.supervisor.evidence import evidence_dir
from wedgewatch.supervisor.life import Life, server_key
from wedgewatch.supervisor.policy import RestartPolicy
from wedgewatch.supervisor.process import UNKNOWN_EXIT, HookServer, log_tail
from wedgewatch.supervisor.recorder import Recorder
from wedgewatch.supervisor.room import BIND_ENV
from wedgewatch.supervisor.standby import Standby
from wedgewatch.supervisor.start import Starter
from wedgewatch.supervisor.tasks import Background, call_in_loop
from wedgewatch.supervisor.watcher import PROBE_SLACK, Reports, Watcher
from wedgewatch.wire.heartbeat import Feed

log = logging.getLogger(__name__)

_AUTO_PORT_RETRIES = 3


class Supervisor:
    """Starts, watches and restarts one server; implements ``protocols.Upstream``."""

    def __init__(
        self,
        cfg: ServerConfig,
        *,
        ledger: Ledger | None = None,
        bus: EventBus | None = None,
        run_id: str | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.cfg = cfg
        self.profile = profiles.check(cfg)
        self.series = profiles.series(cfg, self.profile)
        self.bus = bus or EventBus()
        self.clock = clock
        # The one writer of this server's rows: every fact below is an event on the bus.
        self.rec = Recorder(ledger, run_id, cfg.name)
        if ledger is not None:
            self.rec.attach(self.bus)
        self._life: Life | None = None
        self._last_url = cfg.url or f"http://{cfg.host}:{cfg.port}"
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()  # set whenever ready, failed or stopped
        self._failure: BaseException | None = None
        self._stopping = False
        self.policy = RestartPolicy(cfg)
        self._bg = Background()
        self._endings: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        key = server_key(cfg)
        self._headers = {"Authorization": f"Bearer {key}"} if key else None
        self.starter = Starter(cfg, self.profile, self.bus, clock, self._headers)
        self.feed = Feed(self.starter.window, self.starter.heartbeat)
        """Every scrape's reading and every wedge verdict, for the proxy (``Proxy(feed=...)``)."""
        reports = Reports(
            crash=self._crash_seen,
            wedge=self._on_wedge,
            recycle=self._recycle,
            spawn=self._bg.spawn,
        )
        self.watcher = Watcher(
            cfg,
            self.starter,
            self.series,
            self.rec,
            self.bus,
            clock,
            self._headers,
            self.feed,
            self.policy,
            reports,
        )
        # Work in flight on the server (the runner sets it to its attempts in flight): a planned
        # recycle waits for it to reach 0. Nothing set: recycle at once.
        self.busy: Callable[[], int] = lambda: 0
        # The spare life beside the serving one (standby.py), when asked for and ours to start.
        self.standby = Standby(self) if cfg.standby and self.profile.owned else None

    # --- the Upstream protocol and what the runner reads ------------------------------------

    @property
    def base_url(self) -> str:
        return self._life.base_url if self._life else self._last_url

    @property
    def life_id(self) -> str | None:
        return self._life.life_id if self._life else None

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def current(self) -> Life | None:
        return self._life

    def life(self) -> LifeInfo | None:
        return self._life.info(self.clock()) if self._life else None

    # --- what the spare (standby.Host) and a drain use -----------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return self._bg.spawn(coro)

    async def end(self, life: Life, reason: str) -> None:
        await self._end(life, reason)

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """A ready, warmed life: fresh, or the running server adopted when ``fresh`` is off."""
        self._loop = asyncio.get_running_loop()
        if self.starter.session is None:
            # force_close: a restarted server leaves no stale keep-alive connection behind.
            connector = aiohttp.TCPConnector(force_close=True)
            self.starter.session = aiohttp.ClientSession(connector=connector)
        try:
            if self.standby is not None:
                await self.standby.check()  # said before the first life: its cores depend on it
            async with self._lock:
                await self._first_life()
        except BaseException:
            await self.stop()
            raise

    async def wait_ready(self) -> None:
        """Return when a ready life exists; raise the supervisor's failure if it gave up."""
        while True:
            if self._failure is not None:
                raise self._failure
            if self._stopping:
                raise ServerDown("the supervisor is stopped")
            life = self._life
            if life is not None and life.ready and not life.restart_due and not life.draining:
                code = life.proc.poll()
                if code is None:
                    return
                # Died since the last scrape: handing it out would burn an attempt on a
                # refused connection, so the crash path starts now.
                self._crash_seen(life, code)
            self._changed.clear()
            await self._changed.wait()

    async def wait_failed(self) -> BaseException:
        """Return the error once the supervisor gives up (or is stopped)."""
        while self._failure is None and not self._stopping:
            self._changed.clear()
            await self._changed.wait()
        return self._failure or ServerDown("the supervisor is stopped")

    async def restart(self, reason: str) -> None:
        """Restart the current life now (counts against ``max_restarts``). With a ready spare the
        spare serves at once and the old life ends once what it holds is done (a handover)."""
        life = self._life
        if life is None:
            await self.wait_ready()  # a restart is already under way
            return
        if (
            self.standby is not None
            and self.standby.ready()
            and await self._handover(reason, life, counted=True)
        ):
            return
        await self._restart(reason, life)

    async def stop(self) -> None:
        """End the current life (no process of its group left) and every background task."""
        self._stopping = True
        self._notify()
        await self._bg.cancel_all()
        if self.standby is not None:
            await self.standby.stop()
        async with self._lock:
            life, self._life = self._life, None
            if life is not None:
                # A server we did not start is left running, as we found it.
                await self._end(life, STOP if life.owned else DETACHED, kill=life.owned)
        await asyncio.gather(*list(self._endings), return_exceptions=True)
        if self.starter.session is not None:
            await self.starter.session.close()
            self.starter.session = None

    def note_attempt(self, api_error: bool, life_id: str | None = None) -> None:
        """The runner reports each attempt's end. ``restart_after_api_errors`` consecutive API
        errors restart the server (after a canary in flight); a replaced life's do not count."""
        call_in_loop(self._loop, self._note_attempt, api_error, life_id)

    async def settle(self, life_id: str | None) -> None:
        """Return once a canary in flight on ``life_id`` has answered (a wedge it found recorded):
        asked after an api_error, so an attempt failed by a wedged server is requeued."""
        life = self._life
        if life is not None and life.life_id == life_id:
            await self._verdict(life)

    async def _verdict(self, life: Life) -> None:
        """Wait (bounded) for a canary in flight on ``life``, whose failure records a wedge."""
        task = life.probe_task
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=self.cfg.canary_timeout + PROBE_SLACK)

    def note_instance_done(self) -> None:
        call_in_loop(self._loop, self._note_instance)

    def attach(self, bus: EventBus) -> Callable[[], None]:
        """Listen to the proxy: stalls and upstream errors trigger a canary; finished requests
        count toward the life's age."""
        return bus.subscribe(lambda ev: call_in_loop(self._loop, self._on_proxy_event, ev))

    # --- bringing a life up ------------------------------------------------------------------

    async def _first_life(self) -> None:
        cfg = self.cfg
        if not self.profile.owned:
            run_hook = cfg.fresh and bool(cfg.restart_hook or cfg.restart_url)
            await self._bring_up(RUN_START if run_hook else ADOPTED, run_hook=run_hook)
            return
        if not cfg.fresh and (cfg.url or cfg.port):
            url = (cfg.url or f"http://{cfg.host}:{cfg.port}").rstrip("/")
            if await self.starter.answers(url):
                await self._make_ready(self.starter.adopt(url))
                return
            log.warning("fresh = false but nothing answers at %s: starting a server", url)
        await self._bring_up(RUN_START)

    async def _bring_up(self, reason: str, run_hook: bool = True) -> None:
        """Start lives until one is ready and warmed, within the restart budget."""
        failures = 0
        port_retries = 0
        while True:
            if self.profile.owned:
                env = self.standby.env() if self.standby is not None else {}
                life = self.starter.launch(reason, env=env)
                life.cores = env.get(BIND_ENV)
            else:
                life = self.starter.external(reason, run_hook)
            try:
                if isinstance(life.proc, HookServer):
                    await asyncio.to_thread(life.proc.start)
                await self._make_ready(life)
                return
            except PortBusyError:
                await self._end(life, PORT_BUSY)
                if self.cfg.port or port_retries >= _AUTO_PORT_RETRIES:
                    raise
                port_retries += 1  # someone took our auto-picked port between check and bind
            except (ServerStartError, WarmupError) as exc:
                failed = WarmupFailed if isinstance(exc, WarmupError) else StartFailed
                kind = failed.kind
                self.bus.publish(
                    failed(
                        member=self.cfg.name, life_id=life.life_id, error=str(exc)[-2000:], warmup=life.warmup
                    )
                )
                await self._end(life, kind)
                failures += 1
                self.policy.start_failed(exc)  # the same failure N times in a row: no more tries
                self.policy.count(exc, kind)
                delay = self.policy.backoff(failures)
                log.warning("%s (%s); retrying in %.1fs", kind, str(exc).splitlines()[0], delay)
                await self.clock.sleep(delay)
                reason, run_hook = kind, True
            except BaseException:
                await asyncio.shield(self._end(life, STOP))
                raise

    async def _make_ready(self, life: Life) -> None:
        await self.starter.await_ready(life)
        await self.starter.warm_up(life)
        life.ready, life.ready_at = True, self.clock()
        self._life = life
        self._last_url = life.base_url
        self.policy.life_ready()
        self.bus.publish(
            ServerReady(
                member=self.cfg.name,
                life_id=life.life_id,
                base_url=life.base_url,
                ready_seconds=round(self.clock() - life.started, 4),
                warmup=life.warmup,
            )
        )
        life.watch_task = self._bg.spawn(self.watcher.watch(life))
        self._notify()
        if self.standby is not None:
            self.standby.keep()

    # --- ending a life and restarting ---------------------------------------------------------

    async def _end(self, life: Life, reason: str, kill: bool = True) -> None:
        """Stop the life's process group (unless ``kill`` is off) and record its end. The work
        is shielded: a cancelled caller cannot leave a group running or a life without its end."""
        if life.ended:
            return
        life.ended = True
        current = asyncio.current_task()
        for t in (life.watch_task, life.probe_task):
            if t is not None and t is not current:
                t.cancel()
        task = asyncio.get_running_loop().create_task(self._finish(life, reason, kill))
        self._endings.add(task)
        task.add_done_callback(self._endings.discard)
        await asyncio.shield(task)

    async def _finish(self, life: Life, reason: str, kill: bool) -> None:
        session = self.starter.session
        if life.ready and session is not None and life.proc.poll() is None:
            # One last scrape, so the recorded age in tokens is the age at the end.
            await life.scrape(session, self.series, self.rec, self.clock, self._headers, 1.0)
        code = await asyncio.to_thread(life.proc.stop, self.cfg.stop_grace) if kill else life.proc.poll()
        if not life.owned and code == UNKNOWN_EXIT:
            code = None
        age = life.info(self.clock())
        self.bus.publish(
            LifeEnded(
                member=self.cfg.name,
                life_id=life.life_id,
                reason=reason,
                exit_code=code,
                age_seconds=round(age.age_seconds, 4),
                age_requests=age.age_requests,
                age_tokens=age.age_tokens,
            )
        )

    async def _restart(self, reason: str, life: Life, counted: bool = True) -> None:
        async with self._lock:
            if self._stopping or life is not self._life:
                return  # a stale alarm: that life is already gone
            if isinstance(life.proc, HookServer) and not (self.cfg.restart_hook or self.cfg.restart_url):
                why = "external server, no restart_hook or restart_url"
                self.bus.publish(
                    RestartSkipped(member=self.cfg.name, life_id=life.life_id, reason=reason, why=why)
                )
                life.restart_due = False
                self._notify()
                return
            # Published before the group dies: the runner marks the attempts in flight.
            self.bus.publish(Restarting(member=self.cfg.name, life_id=life.life_id, reason=reason))
            self._life = None
            try:
                if counted:
                    self.policy.count(ServerError(reason), reason)
                # A spare is promoted before the old life is ended: what waits for the next life
                # goes to it at once, while the old group is still being stopped.
                spare = await self.standby.take() if self.standby is not None else None
                if spare is not None:
                    self._promote(*spare, life, reason, planned=False)
                await self._end(life, reason)
                if spare is not None and self.standby is not None:
                    self.standby.keep()
                    return
                await self.starter.wait_port_free()
                await self._bring_up(reason)
            except ServerError as exc:
                await self._end(life, reason)  # when the budget was spent before it ended
                self._failure = exc
                self.bus.publish(GaveUp(member=self.cfg.name, reason=reason, error=str(exc)[-2000:]))
                log.error("supervisor gave up: %s", exc)
            finally:
                self._notify()

    async def _recycle(self, reason: str, life: Life) -> None:
        """A planned restart, after a drain (drain.py): what is still in flight then is ended by
        the restart, and requeued by the runner. With a spare, a handover instead: the old life
        serves on until the spare is ready (one still starting, or the next one once the life
        before has retired)."""
        if (
            self.standby is not None
            and await self.standby.arrival()
            and await self._handover(reason, life, counted=False)
        ):
            return
        await drain(life, reason, self)
        await self._restart(reason, life, counted=False)

    async def _handover(self, reason: str, life: Life, counted: bool) -> bool:
        """A planned restart with a ready spare: the spare serves at once (new requests and new
        attempts go to it; an attempt under way goes on there with its next request), and the
        old life ends in the background once the requests it holds are done (``drain.retire``).
        No ``Restarting``: the old life's attempts are not cut. False when no spare could be
        taken after all, or the restart budget is spent (the caller restarts as without one)."""
        async with self._lock:
            if self._stopping or life is not self._life:
                return True  # a stale request: that life is gone already
            if counted:
                try:
                    self.policy.count(ServerError(reason), reason)
                except ServerError:
                    self.policy.restarts -= 1  # the caller's restart counts it, and gives up
                    return False
            spare = await self.standby.take() if self.standby is not None else None
            if spare is None:
                if counted:
                    self.policy.restarts -= 1
                return False
            self._promote(*spare, life, reason, planned=True)
        self._bg.spawn(self._retire(life, reason))
        return True

    async def _retire(self, life: Life, reason: str) -> None:
        """The replaced life of a handover: ended once idle (or wedged, crashed, or too slow),
        and then a new spare behind the promoted one."""
        try:
            await retire(life, reason, self, self.watcher.view)
        finally:
            await self._end(life, CRASH if life.crashed else WEDGE if life.wedged else reason)
        if self.standby is not None:
            self.standby.keep()

    def _promote(self, spare: Life, woke: float | None, old: Life | None, reason: str, planned: bool) -> None:
        """The spare serves from now on (its ready event was published when it became ready)."""
        self._life = spare
        self._last_url = spare.base_url
        self.policy.life_ready()
        now = self.clock()
        idle = round(now - (spare.ready_at if spare.ready_at is not None else now), 4)
        self.bus.publish(
            Promoted(
                member=self.cfg.name,
                life_id=spare.life_id,
                replaced=old.life_id if old is not None else None,
                reason=reason,
                idle=idle,
                woke=woke,
                planned=planned,
            )
        )
        log.warning(
            "spare life %s serves in place of %s (%s)", spare.life_id, old.life_id if old else None, reason
        )
        spare.watch_task = self._bg.spawn(self.watcher.watch(spare))
        self._notify()

    # --- watching ------------------------------------------------------------------------------

    async def _on_wedge(self, life: Life, evidence: dict[str, Any]) -> None:
        if life.wedged or life.ended:
            return
        life.wedged = True
        age = life.info(self.clock())
        detail = {
            **evidence,
            "life_id": life.life_id,
            "age_seconds": round(age.age_seconds, 3),
            "age_requests": age.age_requests,
            "age_tokens": age.age_tokens,
        }
        # The proxy releases the life's clients first; then what a bug report needs is kept,
        # before the restart kills the group, and the wedge event names it (evidence.py).
        self.feed.stopped(detail, life.life_id)
        if life.log_path is not None and life.owned:
            detail["evidence"] = await capture_evidence(
                evidence_dir(life.log_path, life.life_id),
                life.proc.pid,
                life.base_url,
                life.log_path,
                self.starter.session,
                self._headers,
            )
        self.bus.publish(Wedged(member=self.cfg.name, life_id=life.life_id, evidence=detail))
        log.warning("wedge on %s: %s", life.life_id, {k: v for k, v in evidence.items() if k != "samples"})
        if self.cfg.restart_on_wedge:
            await self._restart(WEDGE, life)

    def _crash_seen(self, life: Life, code: int) -> None:
        """Start the crash path once per life, whoever noticed first."""
        if not life.crashed and not life.ended:
            life.crashed = True
            self._bg.spawn(self._on_crash(life, code))

    async def _on_crash(self, life: Life, code: int) -> None:
        if life.ended:
            return
        tail = redact.text(log_tail(life.log_path)) if life.log_path else ""
        self.bus.publish(Crashed(member=self.cfg.name, life_id=life.life_id, exit_code=code, log_tail=tail))
        log.warning("server %s exited with code %s", life.life_id, code)
        if self.cfg.restart_on_crash:
            await self._restart(CRASH, life)
            return
        async with self._lock:
            if life is self._life:
                self._life = None
                await self._end(life, CRASH)
                self._failure = ServerDown(f"the server exited with code {code} and restart_on_crash is off")
                self._notify()

    # --- what others tell us ------------------------------------------------------------------

    def _on_proxy_event(self, ev: Event) -> None:
        life = self._life
        if life is not None and life.ready:
            self.watcher.hear(life, ev, probe=not self._stopping)

    def _note_attempt(self, api_error: bool, life_id: str | None) -> None:
        life = self._life
        if life is None or (life_id is not None and life_id != life.life_id):
            return
        reason = self.policy.attempt(api_error)
        if reason:
            # The runner's next attempt must wait for the new life, not start on this one and die.
            life.restart_due = True
            self._bg.spawn(self._restart_after_verdict(reason, life))

    async def _restart_after_verdict(self, reason: str, life: Life) -> None:
        """After the canary in flight: a wedge it finds makes the restart, and the attempts that
        failed there are requeued (killing the life first cancelled it, at time_scale 50)."""
        await self._verdict(life)
        if life is not self._life or (life.wedged and self.cfg.restart_on_wedge):
            return
        self.bus.publish(
            ApiErrors(
                member=self.cfg.name, life_id=life.life_id, consecutive=self.cfg.restart_after_api_errors
            )
        )
        await self._restart(reason, life)

    def _note_instance(self) -> None:
        reason = self.policy.instance_done()
        life = self._life
        if reason and life is not None and not life.recycling:
            life.recycling = True
            self._bg.spawn(self._recycle(reason, life))

    def _notify(self) -> None:
        self._changed.set()
