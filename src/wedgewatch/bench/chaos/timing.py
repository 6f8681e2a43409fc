"""What a fault cost the run in time, read from the ledger: each request's chain of legs (a
request the proxy resumed is a row ``resumed`` and the legs that went on, linked by
``resumed_as``), linked to the agent's exchange it carried (an attempt's n-th request is its
trajectory's step n); each struck request's added seconds against the control's same request;
how much the same request's time varies between the two controls; how long a runner takes to
have a ready life; and what each fault struck.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wedgewatch.base import vocab
from wedgewatch.bench.chaos.process import Sample
from wedgewatch.bench.chaos.replies import Exchange
from wedgewatch.bench.chaos.table import Dealt
from wedgewatch.ledger import Ledger


@dataclass
class Run:
    """A finished run, as the checker reads it."""

    run_id: str
    ledger: Path
    workdir: Path
    exchanges: list[Exchange]
    samples: list[Sample] = field(default_factory=list)
    dealt: list[Dealt] = field(default_factory=list)


def requests(ledger: Ledger, run_id: str) -> list[dict[str, Any]]:
    """The run's request rows, each with its ``detail`` read."""
    rows = ledger.query(
        "SELECT q.* FROM requests q JOIN attempts a ON a.attempt_id = q.attempt_id WHERE a.run_id = ?"
        " ORDER BY q.started_at",
        (run_id,),
    )
    return [{**dict(r), "detail": json.loads(r["detail_json"] or "{}")} for r in rows]


def timed(ledger: Ledger, run: Run) -> dict[str, list[dict[str, Any]]]:
    """Each request key of the run's exchanges -> its chain of legs in the ledger: an attempt's
    n-th request (its first leg) is its trajectory's step n."""
    by_attempt: dict[str, list[list[dict[str, Any]]]] = {}
    for chain in legs(requests(ledger, run.run_id)):
        by_attempt.setdefault(str(chain[0]["attempt_id"]), []).append(chain)
    out: dict[str, list[dict[str, Any]]] = {}
    for e in run.exchanges:
        chains = by_attempt.get(e.attempt_id, [])
        if e.step <= len(chains):
            out.setdefault(e.request, chains[e.step - 1])
    return out


def seconds(chain: list[dict[str, Any]]) -> float:
    """A request's wall-clock from its first leg's start to its last leg's end."""
    return float(chain[-1]["started_at"] + chain[-1]["duration"] - chain[0]["started_at"])


def legs(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each request's chain of legs (a resumed row, then the legs that went on), first leg first."""
    by_id = {r["request_id"]: r for r in rows}
    later = {str(r["detail"].get("resumed_as")) for r in rows if r["detail"].get("resumed_as")}
    chains = []
    for r in rows:
        if r["request_id"] in later:
            continue
        chain = [r]
        while chain[-1]["detail"].get("resumed_as") in by_id and len(chain) < 10:
            chain.append(by_id[chain[-1]["detail"]["resumed_as"]])
        chains.append(chain)
    return chains


def added_times(ledger: Ledger, run: Run, control: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """For each fault, each request in flight on a life it struck that the proxy carried on to
    the end (a chain of legs ending ``ok``): its added seconds against the control's same
    request, and what the proxy's resume is allowed to cost: the fault's detection (the strike
    to the life's end), the restart (the life's end to the next ready life), the work redone (a
    request whose client reads no stream has received nothing, so it is sent again whole: the
    seconds it had run when struck) and one prefill of it (its first token in the control)."""
    mine = timed(ledger, run)
    key_of = {id(chain[0]): key for key, chain in mine.items()}
    lives = sorted(
        (dict(r) for r in ledger.query("SELECT * FROM server_life_view ORDER BY started_at")),
        key=lambda lv: lv["started_at"],
    )
    by_id = {lv["life_id"]: lv for lv in lives}
    out = []
    for d in run.dealt:
        if d.at is None:
            continue
        for life_id in dict.fromkeys(d.lives):
            life = by_id.get(life_id)
            if life is None:
                continue
            end = life.get("ended_at")
            ready = next(
                (lv["ready_at"] for lv in lives if lv["started_at"] >= (end or d.at) and lv["ready_at"]), None
            )
            for chain in mine.values():
                first, last = chain[0], chain[-1]
                if (
                    first["life_id"] != life_id
                    or not first["started_at"] <= d.at <= first["started_at"] + first["duration"]
                ):
                    continue
                key = key_of.get(id(first))
                if len(chain) < 2 or last["outcome"] != vocab.OK or key not in control:
                    continue
                out.append(
                    {
                        "fault": d.planned.n,
                        "kind": d.planned.kind,
                        "request_id": first["request_id"],
                        "legs": len(chain),
                        "added": round(seconds(chain) - seconds(control[key]), 3),
                        "detection": None if end is None else round(end - d.at, 3),
                        "restarting": None if end is None or ready is None else round(ready - end, 3),
                        "redone": 0.0 if first["client_stream"] else round(d.at - first["started_at"], 3),
                        "prefill": round(float(control[key][0]["ttft"] or 0.0), 3),
                    }
                )
    return out


def start_seconds(ledger: Ledger, run_id: str) -> float:
    """The longest a runner of the run took from its start to a ready life (the control's:
    what a restart of the run costs when nothing is wrong)."""
    starts = [float(r[0]) for r in ledger.query("SELECT ts FROM run_marks WHERE run_id = ?", (run_id,))]
    ready = [
        float(r[0]) for r in ledger.query("SELECT ready_at FROM server_life_view WHERE ready_at IS NOT NULL")
    ]
    spans = [min((t for t in ready if t >= s), default=s) - s for s in starts]
    return max(spans, default=0.0)


def control_bound(a: dict[str, list[dict[str, Any]]], b: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """How much the same request's wall-clock differs between the two control runs (median and
    max seconds); the bound on a struck request's time beyond detection and restart is twice
    that max, and at least one second."""
    diffs = [abs(seconds(a[k]) - seconds(b[k])) for k in a if k in b]
    if not diffs:
        return {"n": 0, "median": 0.0, "max": 0.0, "bound": 1.0}
    mx = max(diffs)
    return {
        "n": len(diffs),
        "median": round(statistics.median(diffs), 3),
        "max": round(mx, 3),
        "bound": round(max(1.0, 2 * mx), 3),
    }


def struck(ledger: Ledger, run: Run) -> dict[int, dict[str, int]]:
    """Per fault dealt: the requests it struck in flight (a request on a life it struck, running
    when it struck, that did not end ``ok``) and the attempts it ended (running then, ended
    other than on the model's side)."""
    rows = requests(ledger, run.run_id)
    attempts = [
        dict(r)
        for r in ledger.query(
            "SELECT a.started_at, e.ended_at, e.status FROM attempts a JOIN attempt_ends e USING (attempt_id)"
            " WHERE a.run_id = ?",
            (run.run_id,),
        )
    ]
    out = {}
    for d in run.dealt:
        if d.at is None:
            continue
        at = d.at
        hit = [
            r
            for r in rows
            if r["life_id"] in d.lives
            and r["outcome"] != vocab.OK
            and r["started_at"] <= at <= r["started_at"] + r["duration"]
        ]
        ended = [
            a
            for a in attempts
            if a["started_at"] <= at <= a["ended_at"] and a["status"] not in vocab.MODEL_SIDE
        ]
        out[d.planned.n] = {"requests": len(hit), "attempts": len(ended)}
    return out
