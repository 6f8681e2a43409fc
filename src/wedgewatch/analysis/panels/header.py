"""The header of a run: instances done of the suite, resolved, failed by the model, failed by the
infrastructure (apart, never in the score), retried, the honest score so far with its interval
beside the score a harness that counts every instance would publish, the elapsed time and an
estimate of what is left. A wrapped run, or the lives of ``serve``, have no suite: their header
counts requests, stalls, resumes and lives."""

from __future__ import annotations

from typing import Any

from wedgewatch.analysis import summary, wrapped
from wedgewatch.analysis.panels.axis import duration
from wedgewatch.analysis.panels.scope import RUN, WRAP, Scope
from wedgewatch.analysis.stats import rate
from wedgewatch.analysis.text import rate_text
from wedgewatch.base.vocab import (
    CRASH,
    EARLY_STOP,
    EMPTY_PATCH,
    FIRST_LIFE,
    IN_FLIGHT,
    INFRA_FAILED,
    MODEL_OUTCOMES,
    OK,
    PENDING,
    RESOLVED,
    RESUMED,
    STALL_KINDS,
    UNRESOLVED,
    WEDGE,
    sql_list,
)
from wedgewatch.ledger.store import Ledger


def header(ledger: Ledger, scope: Scope, now: float) -> dict[str, Any]:
    """The header's numbers, as the template shows them."""
    if scope.kind == RUN:
        return _run(ledger, scope, now)
    return _lives_only(ledger, scope, now)


def _run(ledger: Ledger, scope: Scope, now: float) -> dict[str, Any]:
    s = summary.summarise(ledger, scope.id)
    o = s["outcomes"]
    n = s["instances"]
    done = n - o[PENDING]
    n_model = sum(o[k] for k in MODEL_OUTCOMES)
    live = s["state"] in IN_FLIGHT
    elapsed = (now - s["started_at"]) if live or s["wall_seconds"] is None else s["wall_seconds"]
    # What is left, at the pace so far: the unfinished instances times the mean time per finished
    # one. None until one is done, or once the run has ended.
    eta = elapsed / done * (n - done) if live and done and n > done else None
    retried = ledger.query(
        "SELECT instance_id FROM attempts WHERE run_id = ? GROUP BY instance_id HAVING COUNT(*) > 1",
        (scope.id,),
    )
    retried_ids = {r[0] for r in retried}
    finished_after = ledger.query(
        f"SELECT instance_id FROM instance_outcomes WHERE run_id = ? AND outcome IN ({sql_list(MODEL_OUTCOMES)})",
        (scope.id,),
    )
    return {
        "kind": RUN,
        "id": scope.id,
        "state": s["state"],
        "live": live,
        "suite": s["suite"],
        "instances": n,
        "done": done,
        RESOLVED: o[RESOLVED],
        "model_failed": o[UNRESOLVED] + o[EMPTY_PATCH] + o[EARLY_STOP],
        INFRA_FAILED: o[INFRA_FAILED],
        PENDING: o[PENDING],
        "retried": len(retried_ids),
        "retried_finished": len(retried_ids & {r[0] for r in finished_after}),
        "honest": rate_text(rate(o[RESOLVED], n_model)),
        "published": rate_text(rate(o[RESOLVED], n)) if done else rate_text(rate(0, 0)),
        "stalls": sum(s["stalls"].values()),
        RESUMED: s[RESUMED],
        "lives": s["server"]["lives"],
        "restarts": s["server"]["restarts"],
        "wedges": s["server"]["wedges"],
        "elapsed": duration(elapsed),
        "eta": duration(eta) if eta is not None else "-",
    }


def _lives_only(ledger: Ledger, scope: Scope, now: float) -> dict[str, Any]:
    mine, mine_params = scope.requests_sql("q")
    by_outcome = {
        str(r[0]): int(r[1])
        for r in ledger.query(
            f"SELECT q.outcome, COUNT(*) FROM requests q WHERE {mine} GROUP BY q.outcome", mine_params
        )
    }
    sub, params = scope.life_ids_sql()
    lives = ledger.query(
        f"SELECT l.start_reason, e.ended_at FROM server_lives l LEFT JOIN server_life_ends e "
        f"ON e.life_id = l.life_id WHERE l.life_id IN ({sub})",
        params,
    )
    kinds = {
        str(r[0]): int(r[1])
        for r in ledger.query(
            f"SELECT kind, COUNT(*) FROM events WHERE life_id IN ({sub}) AND kind IN ({sql_list([WEDGE, CRASH])}) "
            "GROUP BY kind",
            params,
        )
    }
    ended, state = None, ""
    if scope.kind == WRAP:
        s = wrapped.summarise(ledger, scope.id)
        ended, state = s["ended_at"], s["state"]
    live = ended is None
    return {
        "kind": scope.kind,
        "id": scope.id,
        "state": state,
        "live": live,
        "requests": sum(by_outcome.values()),
        OK: by_outcome.get(OK, 0),
        "stalls": sum(by_outcome.get(k, 0) for k in STALL_KINDS),
        RESUMED: by_outcome.get(RESUMED, 0),
        "lives": len(lives),
        "restarts": sum(1 for r in lives if r[0] not in FIRST_LIFE),
        "wedges": kinds.get(WEDGE, 0),
        "crashes": kinds.get(CRASH, 0),
        "elapsed": duration((ended if ended is not None else now) - scope.started_at),
    }
