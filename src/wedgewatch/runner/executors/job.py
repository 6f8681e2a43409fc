"""What crosses from the driver to an executor's worker and back: an attempt's job and its
agent's ending."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wedgewatch.base.protocols import AgentResult, SandboxFactory
from wedgewatch.config import Config


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
    api_key: str = "wedgewatch"  # what the agent presents to the proxy (its key off loopback)
