"""A harness's own retries, read from the request rows: which failed requests it sent again, the
same request, with success.

A harness (mini-swe-agent's default retries, an SDK's ``max_retries``, a script's loop) that
meets a failed request often sends it again. When the same request later ends ``ok``, the agent
went on with its answer: the server cost the instance time, not its outcome, so the failure must
not make the instance ``infra_failed`` nor put it on a rerun list (``audit``), and a wrapped run's
tags show it ``recovered``.

"The same request" is the same content fingerprints (``detail_json.fp``: the hashes of its prompt
lines and of each message, ``wire/fingerprint.py``), on the same path, under the same tag. The
body's other fields (``max_tokens``, ``temperature``, ``model``) are not hashed, so a retry that
changes only those is still the same request. A row without fingerprints (a request with no text)
is never matched: nothing says what it asked. Only a later request counts (it started after the
failed one did), and only an ``ok`` one: a retry that failed too recovers nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from wedgewatch.base.vocab import MODEL_OUTCOMES, OK, is_infra_outcome
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger, Row


def content_key(row: Mapping[str, Any]) -> str | None:
    """What makes two request rows the same request: path, tag and fingerprints; None for a row
    whose ``detail_json`` holds no fingerprints."""
    try:
        detail = json.loads(row.get("detail_json") or "{}")
    except (TypeError, ValueError):
        return None
    fp = detail.get("fp") if isinstance(detail, dict) else None
    if not isinstance(fp, dict) or not (fp.get("lines") or fp.get("messages")):
        return None
    return json.dumps([row.get("path"), row.get("attempt_id"), fp], sort_keys=True)


def recovered(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    """The request ids of the rows that ended in an infrastructure outcome and were sent again,
    the same request, by a later request that ended ``ok``."""
    ordered = sorted(rows, key=lambda r: (float(r["started_at"]), str(r["request_id"])))
    last_ok: dict[str, float] = {}  # content -> the start of its latest ok request
    for row in ordered:
        key = content_key(row)
        if key is not None and row["outcome"] == OK:
            last_ok[key] = float(row["started_at"])
    out: set[str] = set()
    for row in ordered:
        if not is_infra_outcome(str(row["outcome"])):
            continue
        key = content_key(row)
        if key is not None and last_ok.get(key, float("-inf")) > float(row["started_at"]):
            out.add(str(row["request_id"]))
    return out


def recovered_instances(ledger: Ledger, run_id: str, outcomes: list[Row]) -> list[str]:
    """A run's instances (``wedgewatch run``) whose model outcome came from an attempt in which a
    request failed on the infrastructure and the agent sent each such request again with success
    (``outcomes``: the run's ``instance_outcomes`` rows). Already among the model outcomes: this
    says the server failed them and the agent's own retry carried them through."""
    finals = {r["final_attempt"]: r["instance_id"] for r in outcomes if r["outcome"] in MODEL_OUTCOMES}
    by_attempt: dict[str, list[dict[str, Any]]] = {}
    for q in queries.run_requests(ledger, run_id):
        if q["attempt_id"] in finals:
            by_attempt.setdefault(str(q["attempt_id"]), []).append(dict(q))
    out = []
    for attempt, rows in by_attempt.items():
        failed = {str(r["request_id"]) for r in rows if is_infra_outcome(str(r["outcome"]))}
        if failed and failed <= recovered(rows):
            out.append(str(finals[attempt]))
    return sorted(out)
