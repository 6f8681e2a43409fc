"""Bringing one server life up: launch (or adopt, or run the restart hook), wait until it is
really ready, warm it up. Each step either succeeds or raises a ServerError subclass with the
evidence in its message (the stage it was stuck at, the last lines of the server's log).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import aiohttp

from wedgewatch.base import redact
from wedgewatch.base.clock import Clock
from wedgewatch.base.errors import PortBusyError, ServerStartError, WarmupError
from wedgewatch.base.events import EventBus, ServerStarting
from wedgewatch.base.protocols import ServerProcess
from wedgewatch.base.vocab import ADOPTED
from wedgewatch.config import ServerConfig
from wedgewatch.supervisor import caches, probes, profiles, warmup
from wedgewatch.supervisor.detector import WedgeDetector
from wedgewatch.supervisor.life import Life, new_life_id
from wedgewatch.supervisor.process import (
    AdoptedServer,
    HookServer,
    LocalServer,
    bind_failed,
    free_port,
    listener_pid,
    log_tail,
    port_busy,
)

log = logging.getLogger(__name__)

PORT_FREE_TIMEOUT = 10.0
"""Seconds a restart waits for the old life's port to be released before PortBusyError."""


class Starter:
    """Creates lives and makes them ready; knows nothing of restarts or policy."""

    def __init__(
        self,
        cfg: ServerConfig,
        profile: profiles.Profile,
        bus: EventBus,
        clock: Clock,
        headers: dict[str, str] | None,
    ) -> None:
        self.cfg = cfg
        self.profile = profile
        self.bus = bus
        self.clock = clock
        self.headers = headers
        self.session: aiohttp.ClientSession | None = None
        self.model = profiles.served_name(cfg)
        self.heartbeat = profiles.heartbeat_rule(cfg, profiles.series(cfg, profile))
        self.window = cfg.heartbeat_window if self.heartbeat else cfg.wedge_window
        """The wedge rule's window (heartbeat_window or wedge_window, see heartbeat_rule)."""

    def _http(self) -> aiohttp.ClientSession:
        if self.session is None:
            raise RuntimeError("the supervisor is not started")
        return self.session

    def new_life(
        self,
        proc: ServerProcess,
        argv: list[str],
        reason: str,
        owned: bool,
        log_path: Path | None = None,
        life_id: str | None = None,
    ) -> Life:
        life = Life(
            life_id or new_life_id(),
            proc,
            argv,
            reason,
            self.clock(),
            WedgeDetector(self.window, self.heartbeat),
            log_path=log_path,
            owned=owned,
            concurrency=profiles.concurrency_limit(argv, self.profile),
        )
        self.bus.publish(
            ServerStarting(
                member=self.cfg.name,
                life_id=life.life_id,
                reason=reason,
                profile=self.profile.name,
                argv=redact.argv(argv),
                flags=self.flags(),
                base_url=life.base_url,
                pid=proc.pid,
                log_path=str(log_path) if log_path else None,
            )
        )
        return life

    def launch(self, reason: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> Life:
        """Start a process of our own: its own group, its own log file, the shared engine caches
        (caches.py); ``env`` and ``args`` are a life's own (a spare's cores and sleep mode)."""
        cfg = self.cfg
        port = cfg.port or free_port(cfg.host)
        if cfg.port and port_busy(cfg.host, port):
            raise PortBusyError(
                f"port {port} on {cfg.host} is already in use: stop what holds it or set server.port = 0"
            )
        argv = [*profiles.launch_argv(cfg, self.profile, cfg.host, port), *args]
        life_id = new_life_id()
        log_path = Path(cfg.log_dir) / f"{life_id}.log"
        secrets = redact.secret_values(argv, cfg.env)  # masked in its log as it prints them
        full = {**caches.env(cfg), **cfg.env, **(env or {})}
        proc = LocalServer(argv, f"http://{cfg.host}:{port}", log_path, full, secrets)
        try:
            proc.start()
        except OSError as exc:
            hint = f"; {self.profile.missing}" if self.profile.missing else ""
            raise ServerStartError(f"cannot run {argv[0]!r}: {exc.strerror or exc}{hint}") from None
        return self.new_life(proc, argv, reason, owned=True, log_path=log_path, life_id=life_id)

    def external(self, reason: str, run_hook: bool) -> Life:
        """A life of a server we do not own; ``run_hook`` runs the restart hook when started."""
        cfg = self.cfg
        assert cfg.url
        log_path = Path(cfg.log_dir) / "restart-hook.log"
        hook = cfg.restart_hook if run_hook else []
        restart_url = cfg.restart_url if run_hook else None
        proc = HookServer(
            cfg.url.rstrip("/"),
            hook,
            log_path,
            cfg.startup_timeout,
            restart_url,
            cfg.restart_token_env,
            redact.secret_values(hook, cfg.env),
        )
        return self.new_life(proc, list(cfg.restart_hook), reason, owned=False, log_path=log_path)

    def adopt(self, url: str) -> Life:
        """The server already listening at ``url`` (``fresh = false``): its argv from /proc."""
        pid = listener_pid(self.cfg.port) if self.cfg.port else None
        argv: list[str] = []
        if pid is not None:
            with contextlib.suppress(OSError):
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                argv = raw.decode(errors="replace").split("\0")[:-1]
        return self.new_life(AdoptedServer(url, pid), argv, ADOPTED, owned=False)

    async def answers(self, url: str) -> bool:
        return await probes.http_status(self._http(), url + self.profile.health_path, 2.0) is not None

    async def await_ready(self, life: Life) -> None:
        """/health 200, the model in /v1/models, a 1-token canary answered: before the deadline,
        and failing at once if the process exits first."""
        http = self._http()
        deadline = self.clock() + self.cfg.startup_timeout
        names, url = profiles.model_names(self.cfg), life.base_url
        stage = f"{self.profile.health_path} to answer 200"
        while True:
            self.check_exited(life)
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise ServerStartError(
                    f"server not ready after {self.cfg.startup_timeout:g}s "
                    f"(waiting for {stage}){self.tail(life)}"
                )
            step = min(remaining, 5.0)
            if await probes.http_status(http, url + self.profile.health_path, step, self.headers) == 200:
                listed = await probes.list_models(http, url, step, self.headers)
                stage = f"{self.model!r} in /v1/models (listed: {listed})"
                if listed is not None and names & set(listed):
                    timeout = min(remaining, self.cfg.canary_timeout)
                    res = await probes.canary(http, url, self.model, timeout, None, self.headers)
                    life.own_requests += 1
                    if res.ok:
                        return
                    stage = f"a 1-token canary (last: {res.error})"
            elapsed = self.clock() - life.started
            await self.clock.sleep(min(0.5, 0.05 + elapsed / 20))

    def check_exited(self, life: Life) -> None:
        code = life.proc.poll()
        if code is None:
            return
        tail = self.tail(life)
        if bind_failed(tail):
            raise PortBusyError(f"server could not bind {life.base_url}: the port is in use{tail}")
        raise ServerStartError(f"server exited with code {code} during start-up{tail}")

    @staticmethod
    def tail(life: Life) -> str:
        if life.log_path is None or not life.log_path.exists():
            return ""
        return f"; last lines of {life.log_path}:\n{redact.text(log_tail(life.log_path, 20))}"

    async def warm_up(self, life: Life) -> None:
        """The warm-up requests (warmup.py: every served name, then each request shape), one
        after another, each under its own deadline."""
        w = self.cfg.warmup
        steps = warmup.plan(self.cfg)
        for i, step in enumerate(steps):
            res = await probes.generate(
                self._http(),
                life.base_url,
                step.model,
                w.prompt,
                w.max_tokens,
                w.timeout,
                self.headers,
                step.extra,
            )
            life.own_requests += 1
            life.warmup.append({**res.as_dict(), **step.label()})
            if not res.ok:
                self.check_exited(life)
                what = f"{step.model!r}" + (f", {step.shape}" if step.shape else "")
                raise WarmupError(f"warm-up request {i + 1} of {len(steps)} ({what}) failed: {res.error}")

    async def canary(self, life: Life) -> probes.ProbeResult:
        res = await probes.canary(
            self._http(),
            life.base_url,
            self.model,
            self.cfg.canary_timeout,
            self.profile.canary_path,
            self.headers,
        )
        life.own_requests += 1
        return res

    async def wait_port_free(self) -> None:
        """After a stop: the fixed port must be free again before the next life binds it."""
        cfg = self.cfg
        if not (self.profile.owned and cfg.port):
            return
        deadline = self.clock() + max(PORT_FREE_TIMEOUT, cfg.stop_grace)
        while port_busy(cfg.host, cfg.port):
            if self.clock() >= deadline:
                raise PortBusyError(
                    f"port {cfg.port} on {cfg.host} still in use after the old server stopped"
                )
            await self.clock.sleep(0.1)

    def flags(self) -> dict[str, Any]:
        """What the life's row records beside its argv (never env values: they may be keys)."""
        c = self.cfg
        return {
            "model": c.model,
            "served_model_name": self.model,
            "arg_sets": c.arg_sets,
            "lora_modules": sorted(c.lora_modules),
            "fresh": c.fresh,
            "warmup": c.warmup.model_dump(),
            "spare_lives": c.standby,
            "cache_dir": c.cache_dir,
            "scenario": c.scenario if c.profile == "sim" else None,
            "time_scale": c.time_scale if c.profile == "sim" else None,
            "env_keys": sorted(c.env),
        }
