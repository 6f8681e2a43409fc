"""What every finished ledger must satisfy, whoever wrote it (``run``, ``serve``, ``wrap``): the
checks a test runs on a ledger after the process that wrote it has stopped."""

from __future__ import annotations

import json

from wedgewatch.base.vocab import RUN_ENDED
from wedgewatch.ledger.schema import SCHEMA_VERSION
from wedgewatch.ledger.store import Ledger

# Keys that would mean a prompt's or a reply's text reached a row.
TEXT_KEYS = ("messages", "content", "prompt", "completion")


def problems(ledger: Ledger) -> list[str]:
    """Each broken rule as one line; empty when the ledger is sound."""
    out: list[str] = []
    q = ledger.query
    if (ok := ledger.integrity()) != "ok":
        out.append(f"integrity_check: {ok}")
    if ledger.schema_version() != SCHEMA_VERSION:
        out.append(f"schema version {ledger.schema_version()}, not {SCHEMA_VERSION}")
    for (life,) in q(
        "SELECT life_id FROM server_lives WHERE life_id NOT IN (SELECT life_id FROM server_life_ends)"
    ):
        out.append(f"server life {life} has no end")
    for (life,) in q(
        "SELECT DISTINCT life_id FROM requests WHERE life_id IS NOT NULL "
        "AND life_id NOT IN (SELECT life_id FROM server_lives)"
    ):
        out.append(f"requests name server life {life}, which has no row")
    for (run,) in q("SELECT run_id FROM runs"):
        marks = [r[0] for r in q("SELECT kind FROM run_marks WHERE run_id = ? ORDER BY id", (run,))]
        if not marks or marks[-1] not in RUN_ENDED:
            out.append(f"run {run} ends without a terminal mark (marks: {marks})")
    for (run,) in q(
        "SELECT harness_run_id FROM harness_runs WHERE harness_run_id NOT IN "
        "(SELECT harness_run_id FROM harness_run_ends)"
    ):
        out.append(f"harness run {run} has no end")
    for (run,) in q(
        "SELECT l.run_id FROM server_lives l WHERE l.run_id IS NOT NULL AND l.run_id NOT IN "
        "(SELECT run_id FROM runs UNION SELECT harness_run_id FROM harness_runs)"
    ):
        out.append(f"server lives name run {run}, which has no row")
    for rid, detail in q("SELECT request_id, detail_json FROM requests"):
        keys = set(json.loads(detail or "{}"))
        if keys & set(TEXT_KEYS):
            out.append(f"request {rid} stores text under {sorted(keys & set(TEXT_KEYS))}")
    return out
