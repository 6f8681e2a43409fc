"""Exports of a run: SWE-bench predictions, per-instance results JSONL, and CSV.

Predictions hold only instances with a model outcome: an instance that failed on the
infrastructure's side (or is still pending) is left out, never written as an empty patch that
the official harness would score as the model's failure.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from wedgewatch.base.vocab import API_ERROR, EARLY_STOP, MODEL_OUTCOMES, RESOLVED, RETRIED
from wedgewatch.config import server_of
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger

FORMATS = ("swebench", "results", "csv")
CSV_FIELDS = (
    "instance_id",
    "outcome",
    RESOLVED,
    "has_model_outcome",
    API_ERROR,
    EARLY_STOP,
    "n_attempts",
    "final_status",
    "final_reason",
    "statuses",
    "infra_seconds",
)


def model_name(ledger: Ledger, run_id: str) -> str:
    """``run.model_name`` from the run's config snapshot, else the name the agent requested (an
    adapter's, with ``agent.model``), else the served model name."""
    run = queries.resolve_run(ledger, run_id)
    cfg = json.loads(run["config_json"])
    server = server_of(cfg)
    name = (
        cfg.get("run", {}).get("model_name")
        or cfg.get("agent", {}).get("model")
        or server.get("served_model_name")
        or server.get("model")
    )
    return str(name or "unknown")


def predictions(ledger: Ledger, run_id: str) -> Iterator[dict[str, Any]]:
    """SWE-bench predictions: ``instance_id``, ``model_name_or_path``, ``model_patch``, for every
    instance with a model outcome. An early stop is the model's failure, so it is written too,
    with whatever patch the agent left (often none), as mini-swe-agent writes its predictions."""
    name = model_name(ledger, run_id)
    rows = ledger.query(
        "SELECT o.instance_id, o.outcome, a.patch FROM instance_outcomes o "
        "JOIN attempt_view a ON a.attempt_id = o.final_attempt "
        "WHERE o.run_id = ? ORDER BY o.position",
        (run_id,),
    )
    for r in rows:
        yield {"instance_id": r["instance_id"], "model_name_or_path": name, "model_patch": r["patch"] or ""}


def _attempt_record(a: Any) -> dict[str, Any]:
    return {
        "attempt_id": a["attempt_id"],
        "attempt_no": a["attempt_no"],
        "status": a["status"],
        "reason": a["reason"],
        "start": a["started_at"],
        "end": a["ended_at"],
        "duration": a["duration"],
        "server_life": a["life_id"],
        "server_age_at_start": {
            "seconds": a["start_age_seconds"],
            "requests": a["start_age_requests"],
            "tokens": a["start_age_tokens"],
        },
        "server_age_at_end": {
            "seconds": a["end_age_seconds"],
            "requests": a["end_age_requests"],
            "tokens": a["end_age_tokens"],
        },
        "steps": a["steps"],
        "tokens": a["tokens"],
        RESOLVED: None if a[RESOLVED] is None else bool(a[RESOLVED]),
        "sandbox": a["sandbox_path"],
    }


def results(ledger: Ledger, run_id: str) -> Iterator[dict[str, Any]]:
    """One record per instance of the suite (the denominator), each with every attempt."""
    by_instance: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in queries.attempts(ledger, run_id):
        by_instance[a["instance_id"]].append(_attempt_record(a))
    for o in queries.instance_outcomes(ledger, run_id):
        attempts = by_instance.get(o["instance_id"], [])
        scored = o["outcome"] in MODEL_OUTCOMES
        yield {
            "instance_id": o["instance_id"],
            "outcome": o["outcome"],
            # null, not false, without a model outcome: averaging the column must not fold the
            # infrastructure's failures (or work not done yet) into the model's score.
            RESOLVED: (o["outcome"] == RESOLVED) if scored else None,
            "has_model_outcome": scored,
            API_ERROR: any(a["status"] == API_ERROR for a in attempts),
            EARLY_STOP: o["outcome"] == EARLY_STOP,
            "final_status": o["final_status"],
            "final_reason": o["final_reason"],
            "n_attempts": len(attempts),
            "attempts": attempts,
        }


def _csv_rows(ledger: Ledger, run_id: str) -> Iterator[dict[str, Any]]:
    for rec in results(ledger, run_id):
        infra = [a for a in rec["attempts"] if a["status"] in RETRIED]
        yield {
            "instance_id": rec["instance_id"],
            "outcome": rec["outcome"],
            RESOLVED: "" if rec[RESOLVED] is None else int(rec[RESOLVED]),  # empty: no model outcome
            "has_model_outcome": int(rec["has_model_outcome"]),
            API_ERROR: int(rec[API_ERROR]),
            EARLY_STOP: int(rec[EARLY_STOP]),
            "n_attempts": rec["n_attempts"],
            "final_status": rec["final_status"] or "",
            "final_reason": rec["final_reason"] or "",
            "statuses": " ".join(
                f"{a['status']}:{a['reason']}" if a["reason"] else a["status"] for a in rec["attempts"]
            ),
            "infra_seconds": round(sum(a["duration"] or 0.0 for a in infra), 3),
        }


def render(ledger: Ledger, run_id: str, fmt: str) -> str:
    """The export as text (JSONL lines or CSV)."""
    if fmt == "swebench":
        return "".join(json.dumps(p) + "\n" for p in predictions(ledger, run_id))
    if fmt == "results":
        return "".join(json.dumps(r) + "\n" for r in results(ledger, run_id))
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(_csv_rows(ledger, run_id))
        return buf.getvalue()
    raise ValueError(f"unknown export format {fmt!r}")
