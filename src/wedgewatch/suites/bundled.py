"""The bundled suite: small SWE-bench-format instances shipped inside the package.

Each instance is one JSON file under ``bundled/``: the SWE-bench fields, plus a ``wedgewatch``
object holding what SWE-bench keeps in a real repository (the files at the base commit) and the
wrong patch the simulator's policy plays when the model fails. ``load_bundled`` hands out only the
SWE-bench fields, so a bundled instance looks like any other instance to the rest of wedgewatch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from wedgewatch.base.errors import SuiteError

EXTRA_KEY = "wedgewatch"


@dataclass(frozen=True, slots=True)
class BundledExtras:
    """What a bundled instance carries beyond SWE-bench's fields."""

    files: dict[str, str]  # path -> text of every file at the base commit
    wrong_patch: str  # a plausible fix that fails some FAIL_TO_PASS tests


@lru_cache(maxsize=1)
def _raw() -> tuple[dict[str, Any], ...]:
    folder = resources.files("wedgewatch.suites") / "bundled"
    rows = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            rows.append(json.loads(entry.read_text(encoding="utf-8")))
    return tuple(rows)


@lru_cache(maxsize=1)
def _by_id() -> dict[str, dict[str, Any]]:
    return {row["instance_id"]: row for row in _raw()}


def load_bundled() -> list[dict[str, Any]]:
    """Every bundled instance (SWE-bench fields only), sorted by instance_id. Fresh dicts each call."""
    return [{k: v for k, v in row.items() if k != EXTRA_KEY} for row in _raw()]


def is_bundled(instance: dict[str, Any] | str) -> bool:
    """Whether ``instance`` (a dict or an instance_id) is one of the bundled instances."""
    iid = instance if isinstance(instance, str) else instance.get("instance_id", "")
    return iid in _by_id()


def bundled_extras(instance: dict[str, Any] | str) -> BundledExtras:
    """The base files and wrong patch of a bundled instance; SuiteError if it is not bundled."""
    iid = instance if isinstance(instance, str) else str(instance.get("instance_id", ""))
    row = _by_id().get(iid)
    if row is None:
        raise SuiteError(f"instance {iid!r} is not in the bundled suite")
    extra = row[EXTRA_KEY]
    return BundledExtras(files=dict(extra["files"]), wrong_patch=extra["wrong_patch"])


def bundled_repo_source(instance: dict[str, Any] | str) -> dict[str, str]:
    """The repository of a bundled instance at its base commit: path -> file text."""
    return bundled_extras(instance).files
