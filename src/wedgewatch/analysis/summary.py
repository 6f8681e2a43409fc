"""A run's summary, computed from the ledger alone: outcomes with infra_failed and pending beside
the score (never folded into failures), attempts by status, stalls by kind, server lives and
restarts, and the time the infrastructure cost.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from wedgewatch.analysis import replacements
from wedgewatch.analysis.retries import recovered_instances
from wedgewatch.analysis.stats import rate
from wedgewatch.base.vocab import (
    ABORTED,
    ATTEMPT_STATUSES,
    CRASH,
    CREATED,
    EARLY_STOP,
    EMPTY_PATCH,
    INFRA_FAILED,
    INTERRUPTED,
    MODEL_OUTCOMES,
    OUTCOMES,
    PENDING,
    RECOVERED,
    RESOLVED,
    RESUMED,
    RETRIED,
    RUN_ENDED,
    RUNNING,
    STALL_KINDS,
    SUBMITTED,
    UNRESOLVED,
    WEDGE,
)
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger


def summarise(ledger: Ledger, run_id: str | None = None) -> dict[str, Any]:
    """Everything ``wedgewatch report`` prints, as a JSON-ready dict."""
    run = queries.resolve_run(ledger, run_id)
    rid = run["run_id"]
    outcomes = queries.instance_outcomes(ledger, rid)
    counts = Counter(r["outcome"] for r in outcomes)
    by_outcome = {k: counts.get(k, 0) for k in OUTCOMES}
    awaiting_eval = sum(1 for r in outcomes if r["outcome"] == PENDING and r["final_status"] == SUBMITTED)
    n_all = len(outcomes)
    n_model = sum(by_outcome[k] for k in MODEL_OUTCOMES)

    att = ledger.query(
        "SELECT status, reason, COUNT(*) AS n, SUM(COALESCE(duration, 0)) AS secs "
        "FROM attempt_view WHERE run_id = ? GROUP BY status, reason",
        (rid,),
    )
    by_status: Counter[str] = Counter()
    infra_reasons: Counter[str] = Counter()
    infra_seconds = 0.0
    for r in att:
        by_status[r["status"]] += r["n"]
        if r["status"] in RETRIED:
            infra_reasons[f"{r['status']}:{r['reason']}"] += r["n"]
            infra_seconds += r["secs"] or 0.0
    retried = ledger.query(
        "SELECT COUNT(DISTINCT instance_id) FROM attempts WHERE run_id = ? AND attempt_no > 1", (rid,)
    )[0][0]

    requests = queries.request_outcomes(ledger, rid)
    stalls = {k: requests.get(k, 0) for k in STALL_KINDS}
    lives = queries.server_lives(ledger, rid)
    # A life started for any other reason than the start of an execution (a resume starts a
    # fresh server too) is a restart: wedge, crash, api_errors, recycle_*, start_failed, ...
    spares = replacements.promoted(ledger, rid)
    restarts = replacements.restarts(lives, spares)
    restart_seconds = replacements.seconds(restarts, spares)
    events = queries.events_by_kind(ledger, rid)
    marks = queries.run_marks(ledger, rid)
    ends = [m for m in marks if m["kind"] in RUN_ENDED]
    wall = (ends[-1]["ts"] - run["started_at"]) if ends else None
    state = marks[-1]["kind"] if marks else CREATED
    alive = queries.live_runners(ledger, rid)
    if alive and state in (INTERRUPTED, ABORTED):
        # One runner of several stopped; the run goes on in the others (docs/scale-out.md).
        state = RUNNING
    return {
        "run_id": rid,
        "suite": run["suite"],
        "config_hash": run["config_hash"],
        "tool_version": run["tool_version"],
        "attempts_max": queries.budgets(ledger, rid)["attempts_max"],  # raised by --resume --attempts
        "seed": run["seed"],
        "started_at": run["started_at"],
        "state": state,
        "runners_alive": alive,
        "wall_seconds": wall,
        "instances": n_all,
        "outcomes": by_outcome,
        "awaiting_evaluation": awaiting_eval,
        # Beside infra_failed, not apart from the outcomes: each has its model outcome.
        RECOVERED: len(recovered_instances(ledger, rid, outcomes)),
        # Pending instances count as not resolved, but a run with nothing final yet (its server
        # never came up, say) has no score: 0/N would read as a model that solved nothing.
        "resolved_rate_all": rate(by_outcome[RESOLVED], n_all if n_all > by_outcome[PENDING] else 0),
        "resolved_rate_model": rate(by_outcome[RESOLVED], n_model),
        "attempts": {
            "total": sum(by_status.values()),
            "by_status": {k: by_status.get(k, 0) for k in ATTEMPT_STATUSES},
            "infra_reasons": dict(infra_reasons.most_common()),
            "instances_retried": retried,
        },
        "requests": dict(sorted(requests.items())),
        "stalls": stalls,
        # Requests whose life was replaced under them and that went on on the next one (the
        # proxy's resume): each cost its attempt nothing.
        RESUMED: requests.get(RESUMED, 0),
        "server": {
            "lives": len(lives),
            "restarts": len(restarts),
            "restart_reasons": replacements.reasons(restarts, spares),
            "wedges": events.get(WEDGE, 0),
            "crashes": events.get(CRASH, 0),
            "by_member": _by_member(lives, restarts),
        },
        "infra_time": {
            "attempt_seconds": round(infra_seconds, 3),
            "restart_seconds": round(restart_seconds, 3),
        },
    }


def _by_member(lives: list[Any], restarts: list[Any]) -> dict[str, dict[str, int]]:
    """Lives and restarts of each pool member (``[[servers]]``); empty for one ``[server]``."""
    restarted = {lv["life_id"] for lv in restarts}
    out: dict[str, dict[str, int]] = {}
    for lv in lives:
        if lv["member"] is not None:
            m = out.setdefault(str(lv["member"]), {"lives": 0, "restarts": 0})
            m["lives"] += 1
            m["restarts"] += lv["life_id"] in restarted
    return out


def _members_text(srv: dict[str, Any]) -> str:
    parts = [f"{name} {m['lives']} ({m['restarts']} restarts)" for name, m in srv["by_member"].items()]
    return f"; lives by member: {', '.join(parts)}" if parts else ""


_NOTHING_FINAL = "no instance has a final outcome yet"
_RECOVERED_NOTE = "of the model outcomes: a request failed, the agent sent it again with success"
_NO_MODEL_OUTCOME = "no instance has a model outcome"


def _pct(rate: dict[str, Any], none: str) -> str:
    if not rate["n"]:
        return f"n/a ({none})"
    lo, hi = rate["ci95"]
    return f"{rate['k']}/{rate['n']} = {rate['rate']:.1%}  (95% CI {lo:.1%}–{hi:.1%})"


def render_text(s: dict[str, Any]) -> str:
    """The summary as plain text lines (what ``report`` prints without --json)."""
    o = s["outcomes"]
    lines = [
        f"run {s['run_id']}  ({s['state']})  suite {s['suite']}  config {s['config_hash']}",
        f"instances {s['instances']}: resolved {o[RESOLVED]}, unresolved {o[UNRESOLVED]}, "
        f"empty_patch {o[EMPTY_PATCH]}, early_stop {o[EARLY_STOP]}  |  "
        f"infra_failed {o[INFRA_FAILED]}, pending {o[PENDING]}"
        + (f" ({s['awaiting_evaluation']} awaiting evaluation)" if s["awaiting_evaluation"] else "")
        + f"  |  {RECOVERED} {s.get(RECOVERED, 0)}",
        f"resolved over all instances:      {_pct(s['resolved_rate_all'], _NOTHING_FINAL)}",
        f"resolved over model outcomes:     {_pct(s['resolved_rate_model'], _NO_MODEL_OUTCOME)}",
        "attempts: "
        + ", ".join(f"{k} {v}" for k, v in s["attempts"]["by_status"].items() if v)
        + f"  (total {s['attempts']['total']}, instances retried {s['attempts']['instances_retried']})",
    ]
    if s["attempts"]["infra_reasons"]:
        lines.append(
            "infrastructure endings: "
            + ", ".join(f"{k} {v}" for k, v in s["attempts"]["infra_reasons"].items())
        )
    lines.append("stalls: " + ", ".join(f"{k} {v}" for k, v in s["stalls"].items()))
    lines.append(f"requests {RESUMED} on the next server life: {s.get(RESUMED, 0)}")
    srv = s["server"]
    lines.append(
        f"server lives {srv['lives']}, restarts {srv['restarts']}"
        + (f" ({json.dumps(srv['restart_reasons'])})" if srv["restarts"] else "")
        + f", wedges {srv['wedges']}, crashes {srv['crashes']}"
        + _members_text(srv)
    )
    t = s["infra_time"]
    lines.append(
        f"time lost to infrastructure: {t['attempt_seconds']:.1f} s in failed attempts, "
        f"{t['restart_seconds']:.1f} s restarting"
    )
    if s["wall_seconds"] is not None:
        lines.append(f"wall clock: {s['wall_seconds']:.1f} s")
    return "\n".join(lines)


def render_table(s: dict[str, Any]) -> Any:
    """The summary as a rich Table (the end of ``run`` and ``report``)."""
    from rich.table import Table

    o = s["outcomes"]
    t = Table(title=f"run {s['run_id']} ({s['state']})", show_header=True, header_style="bold")
    t.add_column("")
    t.add_column("count", justify="right")
    t.add_column("note")
    n = s["instances"]
    t.add_row("instances", str(n), f"suite {s['suite']}")
    for key in MODEL_OUTCOMES:
        t.add_row(key, str(o[key]), "model outcome")
    t.add_row(INFRA_FAILED, str(o[INFRA_FAILED]), "every attempt failed on our or the server's side")
    pend = "not final yet" + (
        f"; {s['awaiting_evaluation']} awaiting evaluation" if s["awaiting_evaluation"] else ""
    )
    t.add_row(PENDING, str(o[PENDING]), pend)
    t.add_row(RECOVERED, str(s.get(RECOVERED, 0)), _RECOVERED_NOTE)
    t.add_section()
    for label, key, note, none in (
        ("resolved / all", "resolved_rate_all", "every instance of the suite", _NOTHING_FINAL),
        (
            "resolved / model outcomes",
            "resolved_rate_model",
            "infra_failed and pending left out",
            _NO_MODEL_OUTCOME,
        ),
    ):
        rate = s[key]
        if rate["n"]:
            lo, hi = rate["ci95"]
            t.add_row(
                label, f"{rate['k']}/{rate['n']} = {rate['rate']:.1%}", f"95% CI {lo:.1%}–{hi:.1%}; {note}"
            )
        else:
            t.add_row(label, "n/a", f"{none}; {note}")
    t.add_section()
    by = s["attempts"]["by_status"]
    t.add_row("attempts", str(s["attempts"]["total"]), ", ".join(f"{k} {v}" for k, v in by.items() if v))
    if s["attempts"]["infra_reasons"]:
        t.add_row("", "", ", ".join(f"{k} {v}" for k, v in s["attempts"]["infra_reasons"].items()))
    t.add_row(
        "stalls", str(sum(s["stalls"].values())), ", ".join(f"{k} {v}" for k, v in s["stalls"].items() if v)
    )
    t.add_row(
        RESUMED, str(s.get(RESUMED, 0)), "requests that went on on the next server life (no attempt lost)"
    )
    srv = s["server"]
    t.add_row(
        "server lives",
        str(srv["lives"]),
        f"{srv['restarts']} restarts"
        + (f" {json.dumps(srv['restart_reasons'])}" if srv["restarts"] else "")
        + f", {srv['wedges']} wedges, {srv['crashes']} crashes"
        + _members_text(srv),
    )
    ti = s["infra_time"]
    t.add_row(
        "time lost to infrastructure",
        f"{ti['attempt_seconds'] + ti['restart_seconds']:.1f}s",
        f"{ti['attempt_seconds']:.1f}s in failed attempts, {ti['restart_seconds']:.1f}s restarting",
    )
    if s["wall_seconds"] is not None:
        t.add_row("wall clock", f"{s['wall_seconds']:.1f}s", "")
    return t
