"""The harness's side: its result files, read by the readers ``scan`` uses, each turned into one
verdict per instance, plus the messages of its trajectories (for fingerprint signatures)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wedgewatch.analysis.scan import readers
from wedgewatch.analysis.scan.readers import VERDICT_WORDS, Facts
from wedgewatch.base.vocab import EARLY_STOP, EMPTY_PATCH, RESOLVED, SUBMITTED, UNRESOLVED


@dataclass
class HarnessFile:
    path: str
    kind: str
    mtime: float
    facts: list[Facts]
    messages: dict[str, list[Any]] = field(default_factory=dict)  # instance_id -> its messages


def _trajectory_messages(path: Path) -> list[Any]:
    data = json.loads(path.read_text(encoding="utf-8-sig"))
    msgs = data.get("messages") or data.get("history") or []
    return msgs if isinstance(msgs, list) else []


def read_results(paths: list[Path]) -> list[HarnessFile]:
    """Every file (a directory stands for its trajectories and preds.json); BadInput naming the
    first one that cannot be read or whose shape is unknown."""
    out = []
    for p in readers.expand(paths):
        fd = readers.read(p)
        hf = HarnessFile(str(p), fd.kind, p.stat().st_mtime, fd.facts, dict(fd.messages))
        if fd.kind.startswith("trajectory") and fd.facts:
            hf.messages[fd.facts[0].instance_id] = _trajectory_messages(p)
        out.append(hf)
    return out


UNKNOWN = "unknown"
"""The verdict of an instance a file names but says nothing of how it ended."""


def verdict(facts: list[Facts]) -> str:
    """One instance's verdict as the harness gave it: resolved/unresolved when a report says so,
    else how the agent ended (submitted, empty_patch, early_stop, or the error it raised); a
    verdict word in a status (``"status": "submitted"``, mini-swe-agent's ``Submitted``) is that
    verdict, not an error (docs/wrap.md lists them)."""
    outcomes = [f.outcome for f in facts if f.outcome]
    for word in (RESOLVED, UNRESOLVED):
        if word in outcomes:
            return word
    if any(f.early_stop for f in facts):
        return EARLY_STOP
    if EMPTY_PATCH in outcomes:
        return EMPTY_PATCH
    statuses = [f.status.split()[0] for f in facts if f.status.strip()]
    bad = [s for s in statuses if s.lower() not in VERDICT_WORDS]
    if bad:
        return f"error:{bad[0]}"
    if any(f.patch_empty is True for f in facts):
        return EMPTY_PATCH
    if SUBMITTED in outcomes or statuses or any(f.patch_empty is False for f in facts):
        return SUBMITTED
    return outcomes[0] if outcomes else UNKNOWN
