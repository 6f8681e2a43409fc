"""The seams. Each is small on purpose (as mini-swe-agent's Model/Environment): an implementation is
picked by a string from a registry, and anything that fits the protocol can be plugged in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class LifeInfo:
    """Which server life served a request, and how old it was at that moment."""

    life_id: str
    age_seconds: float
    age_requests: int
    age_tokens: int


ProxyView = Callable[[str], tuple[int, int]]
"""What the proxy knows of one server life (by life id): the requests it holds waiting on it, and
the tokens it has relayed from it so far. The supervisor counts the first as work and the second
as movement, so a wedge is seen even when the server's own gauges read 0 (``Proxy.held_on``)."""


def no_proxy(life_id: str) -> tuple[int, int]:
    """The ``ProxyView`` of a server with no proxy in front: nothing held, nothing relayed."""
    return 0, 0


@runtime_checkable
class Upstream(Protocol):
    """Where the proxy sends requests. The supervisor's current server life is one; a fixed URL
    is another."""

    @property
    def base_url(self) -> str:
        """Root URL of the server, without ``/v1`` (for example ``http://127.0.0.1:8000``)."""
        ...

    def life(self) -> LifeInfo | None:
        """The current server life and its age, or None when nobody supervises the server."""
        ...


@runtime_checkable
class Replaceable(Protocol):
    """An ``Upstream`` whose server can be between lives (a restart under way, or the first life
    not ready yet): ``life()`` is None then, and ``wait_ready`` returns once a ready life exists,
    or raises when there will be none (the supervisor gave up or was stopped)."""

    async def wait_ready(self) -> None: ...


@runtime_checkable
class Router(Protocol):
    """An ``Upstream`` of several servers (a pool, ``[[servers]]``): each request goes to the one
    ``route`` picks, and ``release`` is called with it when the request is over. As an
    ``Upstream`` it answers for the pool as a whole: ``life()`` is None only when no member has
    a ready life."""

    def route(self, tag: str | None) -> Upstream:
        """The member for a request tagged ``tag`` (its attempt): the member the tag went to
        before while that one is ready, else the ready member with the fewest requests in flight."""
        ...

    def release(self, member: Upstream) -> None:
        """A request ``route`` sent to ``member`` is over."""


@runtime_checkable
class Resumable(Protocol):
    """A ``Router`` whose servers' lives a supervisor replaces: what a request needs to be sent
    again when the life serving it was replaced under it (the proxy's resume, docs/proxy.md)."""

    async def replacing(self, life_id: str, within: float) -> bool:
        """Whether the life is wedged, crashed or being replaced: the supervisor's verdict,
        waited for up to ``within`` seconds (0: as things stand)."""
        ...

    async def after(self, life_id: str, within: float) -> None:
        """Return once a ready life other than ``life_id`` serves; ``TimeoutError`` after
        ``within`` seconds, or the supervisor's error when it gave up."""
        ...

    def continuation(self, member: Upstream) -> str | None:
        """How ``member``'s server continues a reply the proxy has begun to relay (a profile's
        ``continuation``: ``token_ids``, ``continue`` or ``prefill``), None when it cannot."""
        ...


@runtime_checkable
class ServerProcess(Protocol):
    """One server life: a process (or an external URL) the supervisor starts, watches and stops."""

    @property
    def base_url(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    def start(self) -> None:
        """Launch in a new process group; returns at once (readiness is the supervisor's job)."""
        ...

    def poll(self) -> int | None:
        """The exit code if the process has ended, else None."""
        ...

    def stop(self, grace: float) -> int | None:
        """SIGTERM the whole group, wait ``grace`` seconds, then SIGKILL; return the exit code."""
        ...


@dataclass(slots=True)
class CommandResult:
    """What one command run in a sandbox gave back."""

    command: str
    exit_code: int | None  # None: killed on timeout
    output: str
    duration: float
    timed_out: bool = False


@runtime_checkable
class Sandbox(Protocol):
    """A fresh working copy of an instance's repository, never reused between attempts."""

    @property
    def path(self) -> Path: ...

    def run(self, command: str, timeout: float, env: Mapping[str, str] | None = None) -> CommandResult:
        """Run a shell command inside the sandbox, in its own process group, with a scrubbed
        environment, killed after ``timeout`` seconds."""
        ...

    def diff(self) -> str:
        """The patch of the working tree against the base commit (``git diff``)."""
        ...

    def close(self) -> None:
        """Remove the sandbox (unless it is kept for debugging)."""
        ...


@dataclass(slots=True)
class AgentTask:
    """Everything an agent gets for one attempt."""

    attempt_id: str
    instance: Mapping[str, Any]  # SWE-bench fields: instance_id, problem_statement, ...
    sandbox: Sandbox
    base_url: str  # the attempt's proxy URL, ending in /v1
    model: str
    api_key: str = "wedgewatch"
    trajectory_path: Path | None = None


@dataclass(slots=True)
class AgentResult:
    """A model-side ending. Infrastructure failures are raised (errors.InfraError), not returned."""

    status: str  # "submitted" or "early_stop"
    reason: str = ""  # early_stop reason, or "" for submitted
    patch: str = ""
    steps: int = 0
    tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Agent(Protocol):
    """Solves one instance in one sandbox. Raises errors.ApiError / HarnessError for
    infrastructure failures; returns an AgentResult for model-side endings."""

    def run(self, task: AgentTask) -> AgentResult: ...


class ServerSide(Protocol):
    """What the runner needs of its servers (``supervisor.pool.Pool``: one server is a pool of
    one). The runner's seam to the supervisor."""

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


class SandboxFactory(Protocol):
    """Makes an attempt's fresh sandbox: the instance's repository at its base commit, in
    ``directory``. ``sandbox.factory_for(cfg)`` gives the configured backend's; tests and the
    benchmarks pass their own."""

    def __call__(self, instance: dict[str, Any], directory: Path, /) -> Sandbox: ...
