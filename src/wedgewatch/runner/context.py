"""What every part of a run shares: the effective config, the ledger, the server and proxy, the
attempts in flight, and the counters the progress display reads (display only: every decision
reads the ledger)."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from wedgewatch.config import Config
from wedgewatch.ledger.store import Ledger
from wedgewatch.protocols import AgentResult, LifeInfo, Sandbox


class ServerSide(Protocol):
    """What the runner needs of its servers (``supervisor.pool.Pool``: one server is a pool of
    one)."""

    @property
    def base_url(self) -> str: ...

    @property
    def life_id(self) -> str | None: ...

    def life(self, attempt_id: str | None = None) -> LifeInfo | None:
        """The life serving ``attempt_id`` (or any ready one)."""

    def bind(self, attempt_id: str) -> LifeInfo | None:
        """Send a new attempt to a server; the life it will run on."""

    async def wait_ready(self) -> None: ...

    def note_attempt(self, api_error: bool, life_id: str | None = None) -> None: ...

    def note_instance_done(self, attempt_id: str | None = None) -> None: ...

    async def settle(self, life_id: str | None) -> None:
        """Wait for the verdict (wedged or not) on a life an attempt just failed on."""


T = TypeVar("T")

SandboxFactory = Callable[[dict[str, Any], Path], Sandbox]
"""(instance, directory) -> a fresh sandbox of the instance's repository at base_commit."""


@dataclass(frozen=True, slots=True)
class Instance:
    """One instance of the run: its id, its place in the suite, its SWE-bench record."""

    instance_id: str
    position: int
    record: dict[str, Any]


@dataclass(slots=True)
class AgentEnding:
    """What the worker thread hands back: a result or the exception that ended the agent."""

    result: AgentResult | None = None
    exc: BaseException | None = None
    sandbox_path: str | None = None
    agent_seconds: float = 0.0
    sandbox_seconds: float = 0.0
    worker: dict[str, Any] | None = None  # where it ran, when not in this process (a Ray worker)


@dataclass(frozen=True, slots=True)
class AttemptJob:
    """Everything an attempt's worker needs, and nothing of the run's live state: it crosses to
    another process (pickled) when the executor is Ray. The worker never writes the ledger: it
    hands back an AgentEnding and the driver writes the rows (docs/scale-out.md says why)."""

    attempt_id: str
    instance: dict[str, Any]
    adir: Path  # <workdir>/<attempt_id>: the sandbox and the trajectory go here
    base_url: str  # the attempt's own path on the proxy
    model: str  # what the agent puts in each request's `model`
    cfg: Config  # the effective config (the agent's settings, the sandbox's)
    make_sandbox: SandboxFactory


class Executor(Protocol):
    """Where attempts run (runner/executors: `local` threads, `ray` tasks), picked by
    ``run.executor``."""

    async def start(self) -> None:
        """Be ready to take attempts (Ray: start or join the cluster)."""

    def submit(self, job: AttemptJob) -> asyncio.Future[AgentEnding]:
        """Start the attempt's work; the future gets its AgentEnding, or ``WorkerLost`` when the
        process running it died. Whoever resolves the future first wins: a restart may end an
        attempt before its worker returns, and a future done early (or cancelled) abandons the
        work (Ray: cancels its task)."""
        ...

    async def stop(self) -> None:
        """Stop whatever still runs and release what ``start`` took; leaves no process behind."""


@dataclass(eq=False)
class InFlight:
    """One attempt whose end row is not written yet."""

    attempt_id: str
    instance_id: str
    life_id: str | None
    started: float
    done: asyncio.Future[AgentEnding]
    # Set when someone other than the attempt's own worker ended it (a server restart, a stop).
    ended_by: tuple[str, str] | None = None


@dataclass
class Counters:
    """For the progress display only."""

    total: int = 0
    final_before: int = 0  # instances already final when this execution began (resume)
    done: int = 0
    running: int = 0
    retried: int = 0
    attempts: int = 0
    api_errors: int = 0
    stalls: int = 0
    restarts: int = 0
    evaluations: int = 0


class Span:
    """Wall and CPU seconds of the event loop's thread over the runner's synchronous sections.
    CPU time (``time.thread_time``) is the runner's own cost; wall time adds waiting for the GIL
    while agent threads run Python."""

    __slots__ = ("_cpu0", "_wall0", "cpu", "wall")

    def __init__(self) -> None:
        self.cpu = self.wall = self._cpu0 = self._wall0 = 0.0

    def start(self) -> None:
        self._wall0, self._cpu0 = time.perf_counter(), time.thread_time()

    def stop(self) -> None:
        self.wall += time.perf_counter() - self._wall0
        self.cpu += time.thread_time() - self._cpu0


@dataclass
class Timings:
    """The runner's own cost per attempt (seconds), excluding the agent and the sandbox."""

    overhead: list[tuple[float, float]] = field(default_factory=list)  # (cpu, wall) per attempt
    decisions: list[tuple[float, float]] = field(default_factory=list)  # each instance_next lookup
    ledger_writes: int = 0
    ledger_seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_write(self, seconds: float, rows: int = 1) -> None:
        with self.lock:
            self.ledger_writes += rows
            self.ledger_seconds += seconds


@dataclass
class RunContext:
    cfg: Config  # effective (time-scaled) config
    ledger: Ledger
    run_id: str
    workdir: Path  # <run.workdir>/<run_id>
    proxy_url: str
    server: ServerSide
    make_sandbox: SandboxFactory
    is_infra: Callable[[str], bool]
    inflight: dict[str, InFlight] = field(default_factory=dict)
    counters: Counters = field(default_factory=Counters)
    timings: Timings = field(default_factory=Timings)
    loop: asyncio.AbstractEventLoop | None = None
    executor: Executor | None = None  # None: the local executor (runner/executors/local.py)
    lost_workers: dict[str, int] = field(default_factory=dict)  # instance_id -> in this execution
    runner_id: str | None = None  # this process's row in `runners` (runner/lease.py)

    def agent_base_url(self, attempt_id: str) -> str:
        """Where the attempt's agent sends its requests: its own path on the proxy, or (without
        the proxy) the current server life itself, unattributed."""
        if self.proxy_url:
            return f"{self.proxy_url}/a/{attempt_id}/v1"
        return f"{self.server.base_url}/v1"

    def append(self, table: str, row: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        self.ledger.append(table, row)
        self.timings.add_write(time.perf_counter() - t0)

    def instance(self, instance_id: str) -> Instance:
        """The instance as the run loaded it, read from the ledger when its turn comes (the
        suite is not held in memory: a run of 2,000 instances costs what one of 200 does)."""
        row = self.ledger.query(
            "SELECT position, instance_json FROM run_instances WHERE run_id = ? AND instance_id = ?",
            (self.run_id, instance_id),
        )[0]
        return Instance(instance_id, int(row["position"]), json.loads(row["instance_json"]))

    def attempt_id(self, instance: Instance, attempt_no: int) -> str:
        # Safe in a URL path (the proxy's /a/<attempt_id>/v1) whatever the instance id holds.
        return f"{self.run_id}-{instance.position}-{attempt_no}"


def run_in_thread(loop: asyncio.AbstractEventLoop, fn: Callable[[], T], name: str) -> asyncio.Future[T]:
    """Run ``fn`` in a new daemon thread; the future gets its result. Whoever resolves the future
    first wins (a restart may end an attempt before its thread returns)."""
    fut: asyncio.Future[T] = loop.create_future()

    def deliver(value: T | None, exc: BaseException | None) -> None:
        if fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)  # type: ignore[arg-type]

    def target() -> None:
        try:
            value = fn()
        except BaseException as exc:
            loop.call_soon_threadsafe(deliver, None, exc)
        else:
            try:
                loop.call_soon_threadsafe(deliver, value, None)
            except RuntimeError:
                pass  # the loop is closed: the run is over and nobody waits for this thread

    # The thread runs in a copy of the caller's context, so it inherits the run's process-group
    # list (``sandbox.groups.scope``) and the commands it starts are killed with the run.
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(target,), name=name, daemon=True).start()
    return fut
