"""What a reader makes of another harness's file: timing samples and per-instance facts (a leaf
module, so each format's reader can live in a module of its own)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    """One duration: an instance's (or one attempt's) wall time and the status beside it."""

    instance_id: str
    duration: float
    status: str
    source: str
    already_infra: bool = False  # the file itself counts this as the infrastructure's failure


@dataclass
class Facts:
    """What one file says about one instance."""

    instance_id: str
    source: str
    outcome: str | None = None
    status: str = ""
    api_error: bool = False
    early_stop: bool = False
    patch_empty: bool | None = None
    already_infra: bool = False


@dataclass
class FileData:
    path: str
    kind: str
    samples: list[Sample] = field(default_factory=list)
    facts: list[Facts] = field(default_factory=list)
    total: int | None = None  # a report's total_instances (the harness's denominator)
    messages: dict[str, list[Any]] = field(default_factory=dict)  # instance_id -> its messages
