"""Suites: the bundled instances shipped in the package, their materialisation as git
repositories, and running an instance's tests as SWE-bench does."""

from __future__ import annotations

from wedgewatch.suites.bundled import (
    BundledExtras,
    bundled_extras,
    bundled_repo_source,
    is_bundled,
    load_bundled,
)
from wedgewatch.suites.materialise import materialise
from wedgewatch.suites.testrun import EvalResult, evaluate, node_ids, parse_verdicts, pytest_command

__all__ = [
    "BundledExtras",
    "EvalResult",
    "bundled_extras",
    "bundled_repo_source",
    "evaluate",
    "is_bundled",
    "load_bundled",
    "materialise",
    "node_ids",
    "parse_verdicts",
    "pytest_command",
]
