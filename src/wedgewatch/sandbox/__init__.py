"""Sandboxes: where an attempt's commands run. A string registry, so a container backend can be
added next to the local one without touching callers."""

from __future__ import annotations

import importlib
from typing import Any

from wedgewatch.errors import BadInput
from wedgewatch.sandbox.local import LocalSandbox

# name -> "module:attribute"; the class must offer ``create(instance, root, *, repos_dir, keep)``.
REGISTRY: dict[str, str] = {
    "local": "wedgewatch.sandbox.local:LocalSandbox",
}


def get_sandbox(name: str) -> Any:
    """The sandbox class registered as ``name`` (call its ``create``); BadInput if unknown."""
    target = REGISTRY.get(name)
    if target is None:
        raise BadInput(f"sandbox: unknown backend {name!r} (known: {', '.join(sorted(REGISTRY))})")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


__all__ = ["REGISTRY", "LocalSandbox", "get_sandbox"]
