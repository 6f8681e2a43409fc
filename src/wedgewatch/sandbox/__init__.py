"""Sandboxes: where an attempt's commands run, picked by ``[sandbox] kind`` from a string
registry: ``local`` (a directory), ``bwrap`` (bubblewrap namespaces), ``container`` (docker or
podman). docs/sandboxes.md says what each isolates."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from wedgewatch.base import registry
from wedgewatch.base.protocols import Sandbox, SandboxFactory
from wedgewatch.config import Config, SandboxConfig
from wedgewatch.sandbox.local import LocalSandbox

# name -> "module:attribute"; the class fits ``Backend``.
REGISTRY: dict[str, str] = {
    "local": "wedgewatch.sandbox.local:LocalSandbox",
    "bwrap": "wedgewatch.sandbox.bwrap:BwrapSandbox",
    "container": "wedgewatch.sandbox.container:ContainerSandbox",
}

NEEDS_REPOSITORY = frozenset({"local", "bwrap"})
"""Kinds that make the working copy from a local mirror or the bundled suite (a container's image
holds its repository)."""


class Backend(Protocol):
    """What a registered sandbox class offers: a fresh sandbox of ``instance``'s repository at its
    base commit under ``root``."""

    def create(
        self,
        instance: dict[str, Any],
        root: Path,
        *,
        repos_dir: Path | None = None,
        keep: bool = False,
        settings: SandboxConfig | None = None,
    ) -> Sandbox: ...


def get_sandbox(name: str) -> Backend:
    """The sandbox class registered as ``name`` (call its ``create``); BadInput if unknown."""
    backend: Backend = registry.load(REGISTRY, name, "sandbox.kind", "backend")
    return backend


def factory_for(cfg: Config) -> SandboxFactory:
    """Sandboxes of the ``[sandbox] kind`` backend, as the run configures them."""
    backend = get_sandbox(cfg.sandbox.kind)
    repos_dir = Path(cfg.suite.repos_dir) if cfg.suite.repos_dir else None

    def make(instance: dict[str, Any], root: Path) -> Sandbox:
        return backend.create(
            instance, root, repos_dir=repos_dir, keep=cfg.run.keep_sandboxes, settings=cfg.sandbox
        )

    return make


__all__ = ["NEEDS_REPOSITORY", "REGISTRY", "Backend", "LocalSandbox", "factory_for", "get_sandbox"]
