"""Where each attempt's agent and sandbox run, picked by ``run.executor`` from a string registry:
``local`` (a thread of this process: the default, no dependency) or ``ray`` (a Ray task on any node
of a cluster: the ``ray`` extra). The supervisor, the proxy, the retry policy and every ledger row
stay in the driver whatever the executor (docs/scale-out.md, "Attempts on Ray")."""

from __future__ import annotations

import importlib

from wedgewatch.config import Config
from wedgewatch.errors import BadInput
from wedgewatch.runner.context import Executor

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
    module, _, attr = REGISTRY[cfg.run.executor].partition(":")
    cls = getattr(importlib.import_module(module), attr)
    executor: Executor = cls(cfg)
    return executor


__all__ = ["REGISTRY", "check", "get_executor", "proxy_host"]
