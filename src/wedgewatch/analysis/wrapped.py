"""A wrapped run's summary: what ``wedgewatch wrap`` recorded of one harness run, read by the id it
printed (``wrap-YYYYMMDD-HHMMSS-xxxx``). ``report`` prints it; ``wrap`` prints its last line.

A wrapped run has no suite and no attempts: the harness keeps its own results (``audit`` reads
them beside the ledger). What the ledger holds is the server's side, and that is what this shows:
the harness's requests by outcome, its stalls, the requests it sent again with success, the
requests resumed across a restart, the server lives with why each started and ended and how old
it was, and the requests grouped by tag where the harness tagged them (analysis/tags.py).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from wedgewatch.analysis import replacements
from wedgewatch.analysis.retries import recovered
from wedgewatch.analysis.tags import UNTAGGED_HINT, by_tag, untagged
from wedgewatch.analysis.text import table
from wedgewatch.base.vocab import (
    CRASH,
    INFRA_FAILED,
    OK,
    RECOVERED,
    RESUMED,
    RUNNING,
    STALL_KINDS,
    WEDGE,
    is_infra_outcome,
)
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger, Row


def _life(lv: Row, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One server life with its age: the supervisor's at its end, else what its requests show (a
    life still running, or left by a wrap that died)."""
    mine = [r for r in rows if r["life_id"] == lv["life_id"]]
    ended = lv["end_reason"] is not None
    return {
        "life_id": lv["life_id"],
        "member": lv["member"],
        "start_reason": lv["start_reason"],
        "started_at": lv["started_at"],
        "ready_seconds": lv["ready_seconds"],
        "end_reason": lv["end_reason"] if ended else RUNNING,
        "age_seconds": lv["age_seconds"] if ended else lv["seconds_alive"],
        "age_requests": lv["age_requests"] if ended else len(mine),
        "age_tokens": lv["age_tokens"] if ended else sum(int(r["tokens_out"] or 0) for r in mine),
    }


def summarise(ledger: Ledger, harness_run_id: str) -> dict[str, Any]:
    """Everything ``report`` prints for a wrapped run, as a JSON-ready dict."""
    run = queries.harness_run(ledger, harness_run_id)
    if run is None:
        raise KeyError(harness_run_id)  # callers resolve the id first (queries.resolve_any)
    rows = [dict(r) for r in queries.harness_requests(ledger, harness_run_id)]
    outcomes = Counter(str(r["outcome"]) for r in rows)
    retried_ok = recovered(rows)
    failed = [r for r in rows if is_infra_outcome(str(r["outcome"]))]
    lives = queries.server_lives(ledger, harness_run_id)
    spares = replacements.promoted(ledger, harness_run_id)
    restarts = replacements.restarts(lives, spares)
    restarted = {lv["life_id"] for lv in restarts}
    events = queries.events_by_kind(ledger, harness_run_id)
    tags = by_tag(rows, retried_ok)
    members: dict[str, dict[str, int]] = {}
    for lv in lives:
        if lv["member"] is not None:
            m = members.setdefault(str(lv["member"]), {"lives": 0, "restarts": 0})
            m["lives"] += 1
            m["restarts"] += lv["life_id"] in restarted
    ended = run["ended_at"]
    return {
        "run_id": harness_run_id,
        "wrapped": True,
        "argv": json.loads(run["argv_json"]),
        "cwd": run["cwd"],
        "base_url": run["base_url"],
        "config_hash": run["config_hash"],
        "tool_version": run["tool_version"],
        "started_at": run["started_at"],
        "ended_at": ended,
        "state": run["end_reason"] or RUNNING,
        "exit_code": run["exit_code"],
        "wall_seconds": (ended - run["started_at"]) if ended is not None else None,
        "requests": {
            "total": len(rows),
            "by_outcome": dict(sorted(outcomes.items())),
            "failed": len(failed),
            RECOVERED: len(retried_ok),
            RESUMED: outcomes.get(RESUMED, 0),
            "untagged": untagged(rows),
        },
        "stalls": {k: outcomes.get(k, 0) for k in STALL_KINDS},
        "server": {
            "lives": len(lives),
            "restarts": len(restarts),
            "restart_reasons": replacements.reasons(restarts, spares),
            "wedges": events.get(WEDGE, 0),
            "crashes": events.get(CRASH, 0),
            "by_member": members,
        },
        "lives": [_life(lv, rows) for lv in lives],
        "tags": tags,
        "by_infra": {
            INFRA_FAILED: sum(1 for t in tags if t["infra"] == INFRA_FAILED),
            RECOVERED: sum(1 for t in tags if t["infra"] == RECOVERED),
        },
        "infra_time": {
            "failed_request_seconds": round(sum(float(r["duration"] or 0.0) for r in failed), 3),
            "restart_seconds": round(replacements.seconds(restarts, spares), 3),
        },
    }


def _n(k: int, plural: str) -> str:
    return f"{k} {plural if k != 1 else plural[:-1]}"


def end_line(s: dict[str, Any]) -> str:
    """The one line ``wrap`` prints at its end: requests, stalls, resumed, restarts."""
    req, srv = s["requests"], s["server"]
    why = ", ".join(f"{k} {v}" for k, v in sorted(srv["restart_reasons"].items()))
    return (
        f"{_n(req['total'], 'requests')} ({req['failed']} failed on the infrastructure, "
        f"{req[RECOVERED]} of them sent again with success), {_n(sum(s['stalls'].values()), 'stalls')}, "
        f"{req[RESUMED]} {RESUMED}, {_n(srv['restarts'], 'restarts')}" + (f" ({why})" if why else "")
    )


def _lives_text(s: dict[str, Any]) -> list[str]:
    rows = [
        (
            lv["life_id"],
            lv["member"],
            lv["start_reason"],
            lv["ready_seconds"],
            lv["end_reason"],
            None if lv["age_seconds"] is None else round(float(lv["age_seconds"]), 1),
            lv["age_requests"],
            lv["age_tokens"],
        )
        for lv in s["lives"]
    ]
    heads = ["life", "member", "started by", "ready s", "ended by", "age s", "requests", "tokens"]
    return table(heads, rows)


def _tags_text(s: dict[str, Any]) -> list[str]:
    tags = s["tags"]
    if not tags:
        return [UNTAGGED_HINT]
    n_untagged = s["requests"]["untagged"]
    head = f"by tag: {len(tags)} tags" + (f", {n_untagged} requests untagged" if n_untagged else "")
    rows = [
        (t["tag"], t["requests"], t[OK], t["stalls"], t["upstream_errors"], t["restarts"],
         t[RESUMED], t[RECOVERED], t["infra"])
        for t in tags
    ]  # fmt: skip
    heads = ["tag", "req", OK, "stall", "upstr", "rst", RESUMED, RECOVERED, "infra"]
    by = s["by_infra"]
    foot = f"{INFRA_FAILED} {by[INFRA_FAILED]}, {RECOVERED} {by[RECOVERED]} (of {len(tags)} tags)"
    return [head, *table(heads, rows), foot]


def render_text(s: dict[str, Any]) -> str:
    """The summary as plain text (what ``report`` prints for a wrapped run without --json)."""
    req, srv = s["requests"], s["server"]
    exit_text = f", exit {s['exit_code']}" if s["exit_code"] is not None else ""
    lines = [
        f"wrapped run {s['run_id']}  ({s['state']}{exit_text})  config {s['config_hash']}  "
        f"wedgewatch {s['tool_version']}",
        "command: " + " ".join(str(a) for a in s["argv"]),
        f"requests {req['total']}: "
        + (", ".join(f"{k} {v}" for k, v in req["by_outcome"].items()) or "none"),
        f"failed on the infrastructure {req['failed']}, of them sent again with success "
        f"({RECOVERED}) {req[RECOVERED]}; {RESUMED} {req[RESUMED]}",
        "stalls: " + ", ".join(f"{k} {v}" for k, v in s["stalls"].items()),
        f"server lives {srv['lives']}, restarts {srv['restarts']}"
        + (f" ({json.dumps(srv['restart_reasons'])})" if srv["restarts"] else "")
        + f", wedges {srv['wedges']}, crashes {srv['crashes']}",
    ]
    if s["lives"]:
        lines += _lives_text(s)
    lines += _tags_text(s)
    t = s["infra_time"]
    lines.append(
        f"time lost to infrastructure: {t['failed_request_seconds']:.1f} s in failed requests, "
        f"{t['restart_seconds']:.1f} s restarting"
    )
    if s["wall_seconds"] is not None:
        lines.append(f"wall clock: {s['wall_seconds']:.1f} s")
    return "\n".join(lines)
