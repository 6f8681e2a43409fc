"""What the HTML report draws for one run, read from the ledger in a few queries: the summary
(``analysis.summary.summarise``, reused as it is), attempts, server lives, events, requests and the
watched token counter's samples. Times are seconds since the run's start."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from wedgewatch.analysis.summary import summarise
from wedgewatch.base.vocab import CRASH, GAVE_UP, IN_FLIGHT, PROMOTED, RESTART, WEDGE, sql_list
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger

# Generated-token counters of the server profiles, in the order the supervisor watches them; the
# first one a run has samples of is the one drawn (its flat stretches are wedges).
TOKEN_COUNTERS = (
    "vllm:generation_tokens_total",
    "sglang:generation_tokens_total",
    "llamacpp:tokens_predicted_total",
    "llamacpp:n_decode_total",
)
_SAMPLE_LIMIT = 200_000  # per run: a day of 0.5 s scrapes; beyond that the plot is thinned in SQL


@dataclass
class RunData:
    run_id: str
    summary: dict[str, Any]
    t0: float  # the run's start (unix seconds)
    t_end: float  # the last thing the ledger saw of it (seconds since t0)
    outcomes: list[dict[str, Any]]
    attempts: list[dict[str, Any]]
    lives: list[dict[str, Any]]
    events: list[dict[str, Any]]
    requests: list[dict[str, Any]]
    counter: str | None
    samples: list[tuple[str, float, float]]  # (life_id, t, value)


def _rel(x: float | None, t0: float) -> float | None:
    return None if x is None else x - t0


def _counter_name(ledger: Ledger, run_id: str) -> str | None:
    names = {
        r[0]
        for r in ledger.query(
            "SELECT DISTINCT name FROM metric_samples WHERE life_id IN "
            "(SELECT life_id FROM server_lives WHERE run_id = ?)",
            (run_id,),
        )
    }
    for name in TOKEN_COUNTERS:
        if name in names:
            return name
    # A `command` profile's own counters: any generated-token total that is not the prompt's.
    other = sorted(n for n in names if "token" in n and "prompt" not in n and n.endswith("_total"))
    return other[0] if other else None


def _samples(ledger: Ledger, run_id: str, name: str, t0: float) -> list[tuple[str, float, float]]:
    lives = "SELECT life_id FROM server_lives WHERE run_id = ?"
    n = ledger.query(
        f"SELECT COUNT(*) FROM metric_samples WHERE name = ? AND life_id IN ({lives})", (name, run_id)
    )[0][0]
    step = max(1, -(-n // _SAMPLE_LIMIT))
    rows = ledger.query(
        "SELECT life_id, ts, value FROM (SELECT life_id, ts, value, ROW_NUMBER() OVER (ORDER BY ts) AS n "
        f"FROM metric_samples WHERE name = ? AND life_id IN ({lives})) AS s WHERE n % ? = 0 ORDER BY ts",
        (name, run_id, step),
    )
    return [(r[0], r[1] - t0, r[2]) for r in rows]


def load_run(ledger: Ledger, run_id: str | None = None) -> RunData:
    """Everything the page shows about one run (None: the latest run)."""
    s = summarise(ledger, run_id)
    rid = s["run_id"]
    t0 = float(s["started_at"])
    attempts = [dict(r) for r in queries.attempts(ledger, rid)]
    for a in attempts:
        a["t_start"], a["t_end"] = _rel(a["started_at"], t0), _rel(a["ended_at"], t0)
    lives = [dict(r) for r in queries.server_lives(ledger, rid)]
    for lv in lives:
        lv["t_start"], lv["t_end"] = _rel(lv["started_at"], t0), _rel(lv["ended_at"], t0)
        lv["t_ready"] = _rel(lv["ready_at"], t0)
    events = [
        {**dict(r), "t": r["ts"] - t0, "detail": json.loads(r["detail_json"] or "{}")}
        for r in ledger.query(
            "SELECT id, ts, kind, life_id, attempt_id, detail_json FROM events WHERE "
            f"kind IN ({sql_list((WEDGE, CRASH, RESTART, GAVE_UP, PROMOTED))}) AND (run_id = ? OR (run_id IS NULL AND "
            "life_id IN (SELECT life_id FROM server_lives WHERE run_id = ?))) ORDER BY id",
            (rid, rid),
        )
    ]
    requests = [
        {**dict(r), "t": r["started_at"] - t0}
        for r in ledger.query(
            "SELECT q.request_id, q.attempt_id, q.life_id, q.started_at, q.ttft, q.duration, q.outcome, "
            "q.tokens_out, q.age_requests FROM requests q JOIN attempts a ON a.attempt_id = q.attempt_id "
            "WHERE a.run_id = ? ORDER BY q.started_at",
            (rid,),
        )
    ]
    counter = _counter_name(ledger, rid)
    samples = _samples(ledger, rid, counter, t0) if counter else []
    marks = queries.run_marks(ledger, rid)
    seen = [0.0]
    seen += [a["t_end"] if a["t_end"] is not None else a["t_start"] for a in attempts]
    seen += [lv["t_end"] if lv["t_end"] is not None else lv["t_start"] for lv in lives]
    seen += [q["t"] + q["duration"] for q in requests] + [e["t"] for e in events]
    seen += [m["ts"] - t0 for m in marks] + [max((t for _, t, _ in samples), default=0.0)]
    if s["state"] in IN_FLIGHT:
        seen.append(min(time.time() - t0, max(seen) + 1.0))  # in flight: running bars reach "now"
    return RunData(
        run_id=rid,
        summary=s,
        t0=t0,
        t_end=max(seen),
        outcomes=[dict(r) for r in queries.instance_outcomes(ledger, rid)],
        attempts=attempts,
        lives=lives,
        events=events,
        requests=requests,
        counter=counter,
        samples=samples,
    )
