"""Where each attempt's agent and sandbox run, picked by ``run.executor`` from a string registry:
``local`` (a thread of this process: the default, no dependency) or ``ray`` (a Ray task on any node
of a cluster: the ``ray`` extra). The supervisor, the proxy, the retry policy and every ledger row
stay in the driver whatever the executor (docs/scale-out.md, "Attempts on Ray")."""

from __future__ import annotations

import asyncio
import importlib
from typing import Protocol

from wedgewatch.base import registry
from wedgewatch.base.errors import BadInput
from wedgewatch.config import Config
from wedgewatch.runner.executors.job import AgentEnding, AttemptJob


class Executor(Protocol):
    """Where attempts run (`local` threads, `ray` tasks), picked by
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


REGISTRY: dict[str, str] = {
    "local": "wedgewatch.runner.executors.local:LocalExecutor",
    "ray": "wedgewatch.runner.executors.onray:RayExecutor",
}
"""Executor name -> the class (module:attr), imported only when picked."""

# The one package an executor needs beyond the core, and the extra that installs it.
NEEDS = {"ray": ("ray", "ray")}


def check(cfg: Config) -> None:
    """Before any row is written: the executor is known and its package is installed."""
    name = cfg.run.executor
    if name not in REGISTRY:
        raise BadInput(f"run.executor: unknown executor {name!r} (known: {', '.join(sorted(REGISTRY))})")
    if name in NEEDS:
        module, extra = NEEDS[name]
        try:
            importlib.import_module(module)
        except ImportError:
            raise BadInput(
                f'run.executor = "{name}" needs the {extra!r} extra ({module} is not installed): '
                f"pip install 'wedgewatch[{extra}]'"
            ) from None


def proxy_host(cfg: Config) -> str:
    """The interface the run's proxy binds: loopback, unless attempts run on Ray and
    ``run.ray.proxy_host`` names an address worker nodes reach."""
    return cfg.run.ray.proxy_host if cfg.run.executor == "ray" else "127.0.0.1"


def get_executor(cfg: Config) -> Executor:
    """The executor ``run.executor`` names, configured from ``cfg``, not yet started."""
    check(cfg)
    cls = registry.load(REGISTRY, cfg.run.executor, "run.executor", "executor")
    executor: Executor = cls(cfg)
    return executor


__all__ = ["REGISTRY", "AgentEnding", "AttemptJob", "Executor", "check", "get_executor", "proxy_host"]
