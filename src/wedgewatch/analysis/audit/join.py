"""The ledger's side, joined to the harness's: each wrapped run's request rows, attributed, and per
instance what they say (stalls, upstream errors, restarts) beside the harness's verdict.

A result file belongs to the latest harness run that started before the file was last written
(``--harness-run`` overrides). Within a run, an instance's outcome is ``infra_failed`` when a
request attributed to it ended in an infrastructure outcome (a stall, ``connection``,
``upstream_http_5xx``) and the harness did not resolve it anyway; ``recovered`` when every such
request was sent again by the harness, the same request, and that one ended ``ok``
(analysis/retries.py); otherwise the harness's verdict.
Across runs, each instance takes its last verdict that was not infrastructure, counting only runs
in which it sent a request (a results file rewritten by a later run still lists earlier
instances).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from wedgewatch.analysis.audit.attribute import AMBIGUOUS, NONE, attribute
from wedgewatch.analysis.audit.results import HarnessFile, verdict
from wedgewatch.analysis.audit.signatures import Signatures
from wedgewatch.analysis.retries import recovered
from wedgewatch.base.errors import BadInput
from wedgewatch.base.vocab import (
    DETACHED,
    INFRA_FAILED,
    RECOVERED,
    RESOLVED,
    STALL_KINDS,
    STOP,
    is_infra_outcome,
)
from wedgewatch.ledger import Ledger, queries


@dataclass
class InstanceRun:
    instance_id: str
    verdict: str = "not_run"
    requests: list[str] = field(default_factory=list)
    stalls: int = 0
    upstream_errors: int = 0
    restarts: int = 0
    ambiguous: int = 0  # stalled requests that name this instance among other candidates
    recovered: int = 0  # of its stalls and upstream errors, those the harness sent again with success

    @property
    def infra(self) -> bool:
        unrecovered = self.stalls + self.upstream_errors - self.recovered
        return unrecovered > 0 and self.verdict != RESOLVED

    @property
    def outcome(self) -> str:
        if self.infra:
            return INFRA_FAILED
        return RECOVERED if self.recovered else self.verdict


def harness_runs(ledger: Ledger) -> list[dict[str, Any]]:
    rows = ledger.query(
        "SELECT h.harness_run_id, h.started_at, h.argv_json, e.ended_at, e.exit_code "
        "FROM harness_runs h LEFT JOIN harness_run_ends e ON e.harness_run_id = h.harness_run_id "
        "ORDER BY h.started_at"
    )
    return [dict(r) for r in rows]


def run_requests(ledger: Ledger, run: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(r) for r in queries.harness_requests(ledger, run["harness_run_id"])]


def assign_files(
    files: list[HarnessFile], runs: list[dict[str, Any]], forced: str | None
) -> dict[str, list[HarnessFile]]:
    ids = [r["harness_run_id"] for r in runs]
    if forced is not None and forced not in ids:
        raise BadInput(f"--harness-run: no harness run {forced!r} in the ledger")
    out: dict[str, list[HarnessFile]] = defaultdict(list)
    for f in files:
        if forced is not None:
            out[forced].append(f)
            continue
        before = [r for r in runs if r["started_at"] <= f.mtime + 1.0]
        if not before:
            raise BadInput(f"{f.path}: written before any wrapped run in the ledger; pass --harness-run")
        out[before[-1]["harness_run_id"]].append(f)
    return out


def audit_run(
    run: dict[str, Any],
    rows: list[dict[str, Any]],
    files: list[HarnessFile],
    sigs: Signatures,
    known: set[str],
) -> tuple[dict[str, InstanceRun], dict[str, Any]]:
    """Per instance of one harness run, and the run's own counts (requests unattributed, ...)."""
    facts = defaultdict(list)
    for f in files:
        for fact in f.facts:
            facts[fact.instance_id].append(fact)
    per = {iid: InstanceRun(iid, verdict(fs)) for iid, fs in facts.items()}
    by: dict[str, int] = {NONE: 0}
    lost: dict[str, list[dict[str, Any]]] = {"infra_unattributed": [], "infra_ambiguous": []}
    retried_ok = recovered(rows)
    for row in rows:
        att = attribute(row, known, sigs)
        by[att.how] = by.get(att.how, 0) + 1
        infra = is_infra_outcome(str(row["outcome"]))
        if att.instance_id is None:
            # A failure the harness sent again with success harmed no instance, whoever's it was.
            if infra and row["request_id"] not in retried_ok:
                entry = {
                    "request_id": row["request_id"],
                    "outcome": row["outcome"],
                    "candidates": att.candidates,
                }
                lost["infra_ambiguous" if att.how == AMBIGUOUS else "infra_unattributed"].append(entry)
                for iid in att.candidates:
                    per.setdefault(iid, InstanceRun(iid)).ambiguous += 1
            continue
        inst = per.setdefault(att.instance_id, InstanceRun(att.instance_id))
        inst.requests.append(str(row["request_id"]))
        if row["outcome"] in STALL_KINDS:
            inst.stalls += 1
        elif infra:
            inst.upstream_errors += 1
        if infra and row.get("life_end") not in (None, STOP, DETACHED):
            inst.restarts += 1  # in flight on a life the supervisor then replaced
        inst.recovered += row["request_id"] in retried_ok
    return per, {"requests": len(rows), "by": by, RECOVERED: len(retried_ok), **lost}
