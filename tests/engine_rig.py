"""The real-engine rig: supervised real servers that tests share without sharing their deaths.

How to use it (the fixture is in tests/conftest.py; mark every test that uses it with
``VLLM_GROUP``, so that xdist runs them on one worker and the server starts once per run):

- ``vllm_faults``: one supervised vLLM for the tests that wedge, kill or freeze it. Each such
  test strikes the current life and must leave the next one ready (``await
  rig.next_life(old)``): the chain goes on whatever order the tests run in, and a test that
  fails half-way leaves the supervisor to replace the life (``await rig.ready()`` at the start
  of each test). Its proxy releases a wedged life's client with an error (``on_wedge = "fail"``);
  build another on the rig's loop (``rig.acall(...)``) for the default resume. It stops after
  the last test in a row that uses it.
- A test that needs a server unlike this one (a short engine timeout, its own flags) starts its
  own (``Rig.start(cfg, ...)``) and stops it: never change a shared one.

A ``Rig`` runs its supervisor and proxy on an event loop of its own, in a thread, so a test of
any loop scope (or none) can use it: ``rig.call(coro_fn)`` runs ``coro_fn()`` on the rig's loop
and returns its result; ``await rig.acall(coro_fn)`` does the same from a test's own loop.
Attributes that are plain reads (``rig.url``, ``rig.life_id``, ``rig.pgid``, ``rig.rows(sql)``)
need neither.

``WEDGEWATCH_TEST_ENGINE_PAUSE=SECONDS`` (the rig's robustness switch): every vLLM engine this
test process starts, directly or through a ``wedgewatch run``, is stopped (SIGSTOP of its
EngineCore) the moment its API server first answers ``/health``, and continued that long after:
the first request sent to it waits that long for its first step, inside the engine, as a slower
machine's CPU vLLM makes it wait (7.6 s measured for a first request with log probabilities).
The whole real-engine group must pass with it (docs/real-servers.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from wedgewatch.base.events import Event, EventBus
from wedgewatch.config import ServerConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.supervisor import Supervisor

T = TypeVar("T")

VLLM_GROUP = pytest.mark.xdist_group("vllm")
PAUSE_ENV = "WEDGEWATCH_TEST_ENGINE_PAUSE"
NEXT_LIFE = 300.0
"""A new life: stop, start (about 30 s for the CPU vLLM on a quiet machine), warm-up; generous."""


class EngineLoop:
    """An asyncio event loop on a thread of its own."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, make: Callable[[], Coroutine[Any, Any, T]]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(make(), self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        if not self.loop.is_running():
            self.loop.close()


@dataclass
class Rig:
    """One supervised real server and a watchdog proxy in front of it (see the module's docstring)."""

    cfg: ServerConfig
    sup: Supervisor
    proxy: Proxy
    ledger: Ledger
    bus: EventBus
    runner: EngineLoop
    events: list[Event] = field(default_factory=list)

    @classmethod
    def start(
        cls, cfg: ServerConfig, watchdog: WatchdogConfig, ledger_path: Path, timeout: float = NEXT_LIFE
    ) -> Rig:
        """Start the server (ready and warmed) and its proxy, on a new loop thread."""
        runner = EngineLoop(f"rig-{cfg.profile}")

        async def up() -> Rig:
            ledger = Ledger(ledger_path)
            bus = EventBus()
            sup = Supervisor(cfg, ledger=ledger, bus=bus)
            try:
                await sup.start()
            except BaseException:
                ledger.close()
                raise
            sup.attach(bus)
            proxy = Proxy(sup, watchdog, ledger=ledger, bus=bus, feed=sup.feed)
            await proxy.start()
            rig = cls(cfg, sup, proxy, ledger, bus, runner)
            bus.subscribe(rig.events.append)
            return rig

        try:
            return runner.submit(up).result(timeout)
        except BaseException:
            runner.close()
            raise

    def stop(self) -> None:
        async def down() -> None:
            await self.proxy.stop()
            await self.sup.stop()

        try:
            self.runner.submit(down).result(120)
        finally:
            self.ledger.close()
            self.runner.close()

    # --- calls on the rig's loop ---------------------------------------------------------------

    def call(self, make: Callable[[], Coroutine[Any, Any, T]], timeout: float = NEXT_LIFE) -> T:
        """Run ``make()`` on the rig's loop and return its result (from a test with no loop)."""
        return self.runner.submit(make).result(timeout)

    async def acall(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``make()`` on the rig's loop, awaited from the test's own loop."""
        return await asyncio.wrap_future(self.runner.submit(make))

    async def ready(self) -> None:
        """Wait for a ready life (a test that struck the last one may have left a restart)."""
        await asyncio.wait_for(self.acall(self.sup.wait_ready), NEXT_LIFE)

    async def next_life(self, old: str) -> str:
        """Wait until a life other than ``old`` is ready; its id."""
        deadline = time.monotonic() + NEXT_LIFE
        while self.sup.life_id in (None, old):
            if time.monotonic() > deadline:
                raise AssertionError(f"no life after {old} within {NEXT_LIFE:g} s")
            await asyncio.sleep(0.2)  # polling a thread's state: no event to wait on from here
        await self.ready()
        life = self.sup.life_id
        assert life is not None and life != old
        return life

    # --- plain reads ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The current life's own root URL (no proxy)."""
        return self.sup.base_url

    @property
    def proxy_url(self) -> str:
        return self.proxy.url

    @property
    def life_id(self) -> str | None:
        return self.sup.life_id

    @property
    def pgid(self) -> int:
        """The current life's process group."""
        life = self.sup.current
        assert life is not None and life.proc.pid is not None
        return life.proc.pid

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self.ledger.query(sql, params)]


# --- the robustness switch: an EngineCore stopped for its first step -------------------------


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def _title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def _descendants(root: int) -> list[int]:
    """Every process under ``root`` (through /proc's children lists: a few reads, not a scan of
    every process on the machine)."""
    out: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        for task in Path(f"/proc/{pid}/task").glob("*/children"):
            with contextlib.suppress(OSError, ValueError):
                kids = [int(k) for k in task.read_text().split()]
                out += kids
                todo += kids
    return out


def _cpu_ticks(pid: int) -> int | None:
    fields = _stat(pid)
    return None if fields is None else int(fields[11]) + int(fields[12])


def _port(pid: int) -> int | None:
    """The ``--port`` on ``pid``'s command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    return int(argv[argv.index("--port") + 1]) if "--port" in argv else None


def _server_of(pid: int) -> int | None:
    """The process whose ``--port`` serves ``pid``'s engine: an EngineCore's parent (vLLM's API
    server); None for any other process."""
    if not _title(pid).startswith("VLLM::EngineCore"):
        return None
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


class FirstStepPause:
    """Stops every new vLLM engine under this process (its EngineCore) for ``seconds`` from the
    moment its API server first answers /health: whatever is sent first (the supervisor's
    warm-up, sent as soon as it sees /health) waits that long for its first step.

    Not told by the engine's CPU time: an EngineCore mostly waits on its Worker during a step
    and spins on its queues when idle, so a short first step (a 4-token warm-up) slipped by and
    the pause fell on a later request, after the wedge detection watched."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.paused: list[int] = []  # EngineCores stopped so far (the test of the rig reads it)
        self._seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="first-step-pause", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.seconds + 5)

    def _watch(self) -> None:
        me = os.getpid()
        while not self._stop.wait(0.1):
            for pid in _descendants(me):
                if pid in self._seen:
                    continue
                server = _server_of(pid)
                if server is not None:
                    self._seen.add(pid)
                    threading.Thread(target=self._pause, args=(pid, server), daemon=True).start()

    def _pause(self, pid: int, server: int) -> None:
        port = None
        while port is None and not self._stop.is_set():  # the API server's port, once known
            port = _port(server)
            if _stat(pid) is None:
                return
            time.sleep(0.05)
        while not self._stop.is_set():  # the engine is up once its server answers /health
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp,
            ):
                if resp.status == 200:
                    break
            if _stat(pid) is None:
                return
            time.sleep(0.05)
        else:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
            self.paused.append(pid)
            time.sleep(self.seconds)
            os.kill(pid, signal.SIGCONT)


def pause_seconds() -> float:
    """The switch's value (0: off)."""
    raw = os.environ.get(PAUSE_ENV, "").strip()
    return float(raw) if raw else 0.0
