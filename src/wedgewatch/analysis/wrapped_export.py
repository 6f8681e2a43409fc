"""Exports of a wrapped run (``wedgewatch export WRAP-ID``): one row per tag, which is one per
instance where the harness tagged its requests.

A wrapped run's ledger holds the server's side only. Its patches and verdicts are the harness's
own (its predictions and results files), so there are no SWE-bench predictions to write; and a
run whose requests carry no tag has no instance to write a row for (``audit`` attributes those by
content, against the harness's results). Each refusal is one line naming what can be exported.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from wedgewatch.analysis.retries import recovered
from wedgewatch.analysis.tags import UNTAGGED_HINT, by_tag
from wedgewatch.base.errors import BadInput
from wedgewatch.base.vocab import OK, RECOVERED, RESUMED
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger

FORMATS = ("results", "csv")
CSV_FIELDS = (
    "instance_id",
    "infra",
    "requests",
    OK,
    "stalls",
    "upstream_errors",
    "restarts",
    RESUMED,
    RECOVERED,
    "tokens_out",
    "seconds",
    "lives",
)


def rows(ledger: Ledger, harness_run_id: str, fmt: str) -> Iterator[dict[str, Any]]:
    """One record per tag of the run, in the order of each tag's first request. BadInput (one
    line) for the swebench format and for a run with no tagged request."""
    if fmt not in FORMATS:
        raise BadInput(
            f"--format {fmt}: {harness_run_id} is a wrapped run, whose patches are the harness's own "
            f"(its predictions file): export writes {' or '.join(FORMATS)} of it, one row per tag"
        )
    reqs = [dict(r) for r in queries.harness_requests(ledger, harness_run_id)]
    tags = by_tag(reqs, recovered(reqs))
    if not tags:
        raise BadInput(f"{harness_run_id}: nothing to export per instance: {UNTAGGED_HINT}")
    lives: dict[str, list[str]] = {}
    for r in reqs:
        tag, life = r.get("attempt_id"), r.get("life_id")
        if isinstance(tag, str) and life is not None and life not in lives.setdefault(tag, []):
            lives[tag].append(str(life))
    for t in tags:
        yield {
            "instance_id": t["tag"],
            "harness_run": harness_run_id,
            **{k: v for k, v in t.items() if k != "tag"},
            "lives": lives.get(t["tag"], []),
        }


def render(ledger: Ledger, harness_run_id: str, fmt: str) -> str:
    """The export as text: JSON lines (``results``) or CSV with a header (``csv``)."""
    records = list(rows(ledger, harness_run_id, fmt))
    if fmt == "results":
        return "".join(json.dumps(r) + "\n" for r in records)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for r in records:
        writer.writerow({**r, "infra": r["infra"] or "", "lives": " ".join(r["lives"])})
    return buf.getvalue()
