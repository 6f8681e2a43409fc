"""The one lazy registry lookup: every string-picked implementation (agents, sandboxes,
executors, simulator policies, ledger backends) is a ``"module:attribute"`` in a table, imported
only when picked, so one choice's optional dependencies never slow down or break another."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from wedgewatch.base.errors import BadInput


def load(table: Mapping[str, str], name: str, what: str, noun: str) -> Any:
    """The attribute ``table[name]`` names, imported now. An unknown ``name`` is ``BadInput``
    naming ``what`` (the setting or flag it came from), the ``noun`` it should have been, and the
    known names."""
    target = table.get(name)
    if target is None:
        raise BadInput(f"{what}: unknown {noun} {name!r} (known: {', '.join(sorted(table))})")
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
