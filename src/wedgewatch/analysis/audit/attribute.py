"""Which instance each request row served: its tag (``/a/<tag>/v1`` or the tag header, when the
tag is an instance id), else its content fingerprints matched against the instances' distinctive
hashes. More than one candidate is ``ambiguous`` and names them; it is never resolved by a guess
(not by the larger count either: a request that quotes two instances has no single owner)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from wedgewatch.analysis.audit.signatures import Signatures

TAG, FINGERPRINT, AMBIGUOUS, NONE = "tag", "fingerprint", "ambiguous", "unattributed"


@dataclass
class Attribution:
    how: str
    instance_id: str | None = None
    candidates: list[str] = field(default_factory=list)


def attribute(row: dict[str, Any], known: set[str], sigs: Signatures) -> Attribution:
    tag = row.get("attempt_id")
    if isinstance(tag, str) and tag in known:
        return Attribution(TAG, tag)
    try:
        detail = json.loads(row.get("detail_json") or "{}")
    except ValueError:
        detail = {}
    fp = detail.get("fp") if isinstance(detail, dict) else None
    if not isinstance(fp, dict):
        return Attribution(NONE)
    hits = sigs.match(fp)
    if len(hits) == 1:
        return Attribution(FINGERPRINT, next(iter(hits)))
    if hits:
        return Attribution(AMBIGUOUS, None, sorted(hits))
    return Attribution(NONE)
