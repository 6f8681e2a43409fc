"""Sandboxes: where an attempt's commands run, picked by ``[sandbox] kind`` from a string
registry: ``local`` (a directory), ``bwrap`` (bubblewrap namespaces), ``container`` (docker or
podman). docs/sandboxes.md says what each isolates."""

from __future__ import annotations

import importlib
from typing import Any

from wedgewatch.errors import BadInput
from wedgewatch.sandbox.local import LocalSandbox

# name -> "module:attribute"; the class must offer
# ``create(instance, root, *, repos_dir, keep, settings)`` (settings: the [sandbox] section).
REGISTRY: dict[str, str] = {
    "local": "wedgewatch.sandbox.local:LocalSandbox",
    "bwrap": "wedgewatch.sandbox.bwrap:BwrapSandbox",
    "container": "wedgewatch.sandbox.container:ContainerSandbox",
}

NEEDS_REPOSITORY = frozenset({"local", "bwrap"})
"""Kinds that make the working copy from a local mirror or the bundled suite (a container's image
holds its repository)."""


def get_sandbox(name: str) -> Any:
    """The sandbox class registered as ``name`` (call its ``create``); BadInput if unknown."""
    target = REGISTRY.get(name)
    if target is None:
        raise BadInput(f"sandbox.kind: unknown backend {name!r} (known: {', '.join(sorted(REGISTRY))})")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


__all__ = ["NEEDS_REPOSITORY", "REGISTRY", "LocalSandbox", "get_sandbox"]
