"""A wrapped run's requests grouped by the tag the harness gave them: per instance where a harness
tags its requests (``wrap --tag``, the ``x-wedgewatch-tag`` header, ``/a/<tag>/v1``), what the
server did to it. ``report`` and ``export`` of a wrapped run show these rows.

A tag's ``infra`` says what the infrastructure did to it: ``infra_failed`` when a request of it
ended in an infrastructure outcome and the harness did not send that request again with success,
``recovered`` when every such request was sent again and succeeded (analysis/retries.py), None
when none failed. Whether the instance was resolved is the harness's to say (``audit`` reads its
results beside these rows); the ledger alone does not know.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from wedgewatch.base.vocab import (
    DETACHED,
    INFRA_FAILED,
    OK,
    RECOVERED,
    RESUMED,
    STALL_KINDS,
    STOP,
    is_infra_outcome,
)

UNTAGGED_HINT = (
    "no request carried a tag (wrap --tag, the x-wedgewatch-tag header, or a base URL /a/<tag>/v1); "
    "`wedgewatch audit RESULTS --suite FILE` attributes untagged requests to instances by content"
)
"""What to do when nothing is tagged: the one command that can still group the requests."""


def by_tag(rows: Iterable[Mapping[str, Any]], retried_ok: set[str]) -> list[dict[str, Any]]:
    """One record per tag, in the order of each tag's first request; ``retried_ok`` are the
    request ids the harness sent again with success (``retries.recovered`` over the same rows)."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        tag = row.get("attempt_id")
        if not isinstance(tag, str):
            continue
        t = out.get(tag)
        if t is None:
            t = out[tag] = {
                "tag": tag,
                "requests": 0,
                OK: 0,
                "stalls": 0,
                "upstream_errors": 0,
                "restarts": 0,
                RESUMED: 0,
                RECOVERED: 0,
                "infra": None,
                "first_started": float(row["started_at"]),
                "last_ended": float(row["started_at"]) + float(row["duration"] or 0.0),
                "tokens_out": 0,
            }
        outcome = str(row["outcome"])
        t["requests"] += 1
        t[OK] += outcome == OK
        t[RESUMED] += outcome == RESUMED
        t["tokens_out"] += int(row.get("tokens_out") or 0)
        t["last_ended"] = max(t["last_ended"], float(row["started_at"]) + float(row["duration"] or 0.0))
        if not is_infra_outcome(outcome):
            continue
        if outcome in STALL_KINDS:
            t["stalls"] += 1
        else:
            t["upstream_errors"] += 1
        if row.get("life_end") not in (None, STOP, DETACHED):
            t["restarts"] += 1  # in flight on a life the supervisor then replaced
        t[RECOVERED] += row["request_id"] in retried_ok
    for t in out.values():
        failed = t["stalls"] + t["upstream_errors"]
        t["infra"] = INFRA_FAILED if failed > t[RECOVERED] else RECOVERED if failed else None
        t["seconds"] = round(t["last_ended"] - t["first_started"], 3)
    return list(out.values())


def untagged(rows: Iterable[Mapping[str, Any]]) -> int:
    """How many of the rows carried no tag."""
    return sum(1 for r in rows if not isinstance(r.get("attempt_id"), str))
