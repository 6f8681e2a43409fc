"""One arm's cells at one seed: every figure read from the ledger, the same way for every arm,
beside the truth the simulator's ``swe`` policy knows (which instances the model solves).

Definitions (docs/demo.md, "The table"):

- an instance's **scored attempt** is its model-side attempt (submitted or early_stop) if it has
  one, else its last attempt;
- an attempt **hung** when it ended ``api_error``, or any of its requests ended without an answer
  (a stall the proxy cut, a client that gave up waiting, a connection lost in a restart);
- a harness **scores** an instance as a model failure when it is not resolved, unless the harness
  reports infrastructure failures apart (wedgewatch) and the instance is ``infra_failed`` or
  ``pending``;
- **of which were hangs**: scored failures whose scored attempt hung; **hidden by hangs**: those
  the model would have solved.
"""

from __future__ import annotations

from typing import Any

from wedgewatch.base.vocab import (
    API_ERROR,
    CLIENT_ERROR,
    EARLY_STOP,
    EMPTY_PATCH,
    INFRA_FAILED,
    MODEL_OUTCOMES,
    OK,
    PENDING,
    RESOLVED,
    RESUMED,
    UNRESOLVED,
)
from wedgewatch.ledger.store import Ledger
from wedgewatch.sim.swe_policy import behaviour

# A resumed leg is no hang either: the request went on, on the next life, and was answered there.
ANSWERED = (OK, CLIENT_ERROR, RESUMED)
"""Request outcomes that are an answer: anything else is a request that waited in vain."""

KEYS = (
    "instances",
    "true_resolved",
    "published_resolved",
    "published_of",
    "true_resolved_on_published",
    "hidden_by_hangs",
    "scored_as_model_failures",
    "of_which_hangs",
    UNRESOLVED,
    EARLY_STOP,
    INFRA_FAILED,
    PENDING,
    "stalls",
    "restarts",
    "wedges",
    "attempts",
    "retried_attempts",
    "hung_attempts",
    "hang_server_seconds",
    "hang_server_seconds_each",
    "hang_server_seconds_max",
    "wall_seconds",
)
"""Every numeric cell, in table order (the JSON's stable keys)."""


def _hangs(ledger: Ledger, run_id: str) -> dict[str, float]:
    """Per attempt that hung: the server seconds (real seconds here) its unanswered requests
    waited; 0.0 for an attempt that ended api_error before any request was recorded."""
    unanswered = f"q.outcome NOT IN ({', '.join('?' * len(ANSWERED))})"
    rows = ledger.query(
        f"SELECT a.attempt_id, a.status, COALESCE(SUM(CASE WHEN {unanswered} THEN q.duration END), 0) "
        f"AS waited, SUM(CASE WHEN {unanswered} THEN 1 ELSE 0 END) AS n_unanswered "
        "FROM attempt_view a LEFT JOIN requests q ON q.attempt_id = a.attempt_id "
        "WHERE a.run_id = ? GROUP BY a.attempt_id, a.status",
        (*ANSWERED, *ANSWERED, run_id),
    )
    return {
        r["attempt_id"]: float(r["waited"])
        for r in rows
        if r["status"] == API_ERROR or (r["n_unanswered"] or 0) > 0
    }


def arm_cells(
    ledger: Ledger, run_id: str, *, skill: float, seed: int, time_scale: float, reports_infra_apart: bool
) -> dict[str, Any]:
    """The arm's cells (``KEYS``) at one seed, from ``run_id``'s rows."""
    from wedgewatch.analysis.summary import summarise

    s = summarise(ledger, run_id)
    hung = _hangs(ledger, run_id)
    last = {
        r["instance_id"]: r["attempt_id"]
        for r in ledger.query(
            "SELECT instance_id, attempt_id FROM attempts WHERE run_id = ? ORDER BY attempt_no", (run_id,)
        )
    }
    published: list[str] = []
    failures = hangs = hidden = true_on_published = 0
    outcomes = ledger.query("SELECT * FROM instance_outcomes WHERE run_id = ? ORDER BY position", (run_id,))
    solves = {r["instance_id"]: behaviour(r["instance_id"], seed, skill) == "solve" for r in outcomes}
    for r in outcomes:
        iid, outcome = r["instance_id"], r["outcome"]
        if reports_infra_apart and outcome not in MODEL_OUTCOMES:
            continue  # infra_failed and pending are reported beside the score, not in it
        published.append(iid)
        true_on_published += solves[iid]
        if outcome == RESOLVED:
            continue
        failures += 1
        scored = r["final_attempt"] or last.get(iid)
        if scored in hung:
            hangs += 1
            hidden += solves[iid]
    o = s["outcomes"]
    attempts = ledger.query(
        "SELECT COUNT(*) AS n, COALESCE(SUM(CASE WHEN attempt_no > 1 THEN 1 ELSE 0 END), 0) AS retried "
        "FROM attempts WHERE run_id = ?",
        (run_id,),
    )[0]
    waited = [w * time_scale for w in hung.values()]
    return {
        "instances": s["instances"],
        "true_resolved": sum(solves.values()),
        "published_resolved": o[RESOLVED],
        "published_of": len(published),
        "true_resolved_on_published": true_on_published,
        "hidden_by_hangs": hidden,
        "scored_as_model_failures": failures,
        "of_which_hangs": hangs,
        UNRESOLVED: o[UNRESOLVED] + o[EMPTY_PATCH],
        EARLY_STOP: o[EARLY_STOP],
        INFRA_FAILED: o[INFRA_FAILED],
        PENDING: o[PENDING],
        "stalls": sum(s["stalls"].values()),
        "restarts": s["server"]["restarts"],
        "wedges": s["server"]["wedges"],
        "attempts": int(attempts["n"]),
        "retried_attempts": int(attempts["retried"]),
        "hung_attempts": len(hung),
        "hang_server_seconds": round(sum(waited), 1),
        "hang_server_seconds_each": round(sum(waited) / len(waited), 1) if waited else 0.0,
        "hang_server_seconds_max": round(max(waited), 1) if waited else 0.0,
        "wall_seconds": round(s["wall_seconds"] or 0.0, 1),
    }
