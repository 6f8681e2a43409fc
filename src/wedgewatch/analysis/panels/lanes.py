"""A lane per server: each life from its start to ready to its end, with why it started and
ended, how old it was and how many requests it served; the supervisor's events on it as markers
(verdicts, canaries, restarts, drains, and any kind this version does not know, drawn plainly
with its name); under each lane, the engine strip (``engine.py``). Positions are percentages of
one time axis shared by every lane of the scope, so a wedge on one server lines up with the
restart it caused.

A life that failed is drawn healthy up to the moment it went wrong and failing from there to its
end (``went_wrong``): a wedge from its last progress (the verdict's evidence: the still stretch
the detector measured, else the last of its readings that moved), a crash or a run of API
errors from its event. Where the ledger does not say when (an older ledger, a life ended for a
failure with no event of it), the whole bar is failing, as the end reason alone says no more."""

from __future__ import annotations

import itertools
import json
from typing import Any

from wedgewatch.analysis.panels.axis import Axis, duration
from wedgewatch.analysis.panels.engine import strips
from wedgewatch.analysis.panels.scope import Scope
from wedgewatch.base.vocab import CANARY, EVENT_KINDS, LIFE_FAILURES, OK, PROXY_STARTED, WEDGE
from wedgewatch.ledger.store import Ledger

MARKED = EVENT_KINDS
"""Kinds drawn with a mark of their own (docs/view.md); any other kind gets the plain mark."""


def _detail(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _marker(ev: Any, axis: Axis) -> dict[str, Any]:
    kind = str(ev["kind"])
    detail = _detail(ev["detail_json"])
    cls = f"m-{kind}" if kind in MARKED else "m-other"
    note = ""
    if kind == CANARY:
        answered = detail.get(OK)
        cls += " failed" if answered is False else (" skipped" if answered is None else "")
        note = (
            "answered"
            if answered
            else ("skipped: " + str(detail.get("skipped", "")) if answered is None else "failed")
        )
    elif "reason" in detail:
        note = str(detail["reason"])
    return {"kind": kind, "cls": cls, "at": axis.at(float(ev["ts"])), "ts": float(ev["ts"]), "note": note}


def went_wrong(kind: str, ts: float, detail: dict[str, Any]) -> tuple[float, str]:
    """When a life's failure began, from its failure event, and how that is known. A wedge's
    verdict comes a still stretch after the engine's last step: the detector's ``flat_seconds``
    before it (the metrics rule), else the last of the evidence's readings (``[wall, tokens,
    running, waiting]``) whose tokens moved (a canary's verdict), else the first reading when none
    moved (no progress since then at least), else the verdict itself."""
    if kind != WEDGE:
        return ts, f"the {kind} event"
    flat = detail.get("flat_seconds")
    if isinstance(flat, int | float) and flat >= 0:
        return ts - float(flat), f"the last token progress, {float(flat):.1f} s before the wedge verdict"
    rows = [r for r in detail.get("samples") or [] if isinstance(r, list) and len(r) >= 2]
    moved = [float(b[0]) for a, b in itertools.pairwise(rows) if a[1] != b[1]]
    if moved:
        return moved[-1], f"the last token progress, {ts - moved[-1]:.1f} s before the wedge verdict"
    if rows:
        first = float(rows[0][0])
        return first, f"the first reading kept, {ts - first:.1f} s before the wedge verdict (none moved)"
    return ts, "the wedge verdict (no readings before it)"


def lanes(ledger: Ledger, scope: Scope, now: float, live: bool) -> dict[str, Any]:
    """The lanes of the scope's servers, one per member (a ``[server]`` is one), oldest first."""
    cond, params = scope.lives_sql("l")
    lives = ledger.query(f"SELECT * FROM server_life_view l WHERE {cond} ORDER BY l.started_at", params)
    sub, sub_params = scope.life_ids_sql()
    served = {
        str(r[0]): (int(r[1]), int(r[2] or 0))
        for r in ledger.query(
            f"SELECT life_id, COUNT(*), SUM(tokens_out) FROM requests WHERE life_id IN ({sub}) GROUP BY life_id",
            sub_params,
        )
    }
    events = ledger.query(
        f"SELECT id, ts, kind, life_id, detail_json FROM events WHERE life_id IN ({sub}) ORDER BY ts, id",
        sub_params,
    )
    if scope.id:
        events += ledger.query(
            "SELECT id, ts, kind, life_id, detail_json FROM events WHERE run_id = ? AND life_id IS NULL "
            "AND kind != ? ORDER BY ts, id",
            (scope.id, PROXY_STARTED),
        )
    ends = [lv["ended_at"] for lv in lives if lv["ended_at"] is not None]
    alive = any(lv["ended_at"] is None for lv in lives)
    t1 = now if live or alive or not ends else max(ends)
    axis = Axis(min([scope.started_at, *(float(lv["started_at"]) for lv in lives)]), t1)
    # The first failure event of each life: from then on it is drawn failing.
    wrong: dict[str, tuple[float, str]] = {}
    for ev in events:
        if ev["kind"] in LIFE_FAILURES and ev["life_id"] and str(ev["life_id"]) not in wrong:
            wrong[str(ev["life_id"])] = went_wrong(
                str(ev["kind"]), float(ev["ts"]), _detail(ev["detail_json"])
            )
    members: dict[str, dict[str, Any]] = {}
    member_of: dict[str, str] = {}
    for lv in lives:
        name = str(lv["member"] or lv["profile"])
        member_of[str(lv["life_id"])] = name
        lane = members.setdefault(name, {"member": name, "lives": [], "markers": [], "life_ids": []})
        lane["life_ids"].append(str(lv["life_id"]))
        life = _life(lv, served.get(str(lv["life_id"]), (0, 0)), axis, now)
        if str(lv["life_id"]) in wrong:
            at, why = wrong[str(lv["life_id"])]
            at = min(
                max(at, float(lv["started_at"])), now if lv["ended_at"] is None else float(lv["ended_at"])
            )
            life["wrong"] = round(min(100.0, (axis.at(at) - life["left"]) / life["width"] * 100), 3)
            life["wrong_note"] = why
            life["failed"] = True
        lane["lives"].append(life)
    for ev in events:
        owner = (
            member_of.get(str(ev["life_id"])) if ev["life_id"] else _detail(ev["detail_json"]).get("member")
        )
        target = members.get(str(owner)) if owner else None
        if target is None and members:
            target = next(iter(members.values()))  # a run's own event (gave_up): its first lane
        if target is not None:
            target["markers"].append(_marker(ev, axis))
    out = list(members.values())
    for lane, strip in zip(out, strips(ledger, [lane["life_ids"] for lane in out], axis), strict=True):
        lane["strip"] = strip
    return {"lanes": out, "ticks": axis.ticks(), "window": duration(axis.t1 - axis.t0)}


def _life(lv: Any, served: tuple[int, int], axis: Axis, now: float) -> dict[str, Any]:
    start, ready, end = float(lv["started_at"]), lv["ready_at"], lv["ended_at"]
    reason = lv["end_reason"]
    alive_for = (float(end) if end is not None else now) - start
    requests = lv["age_requests"] if lv["age_requests"] is not None else served[0]
    tokens = lv["age_tokens"] if lv["age_tokens"] is not None else served[1]
    left = axis.at(start)
    width = max(0.3, axis.at(end) - left)
    return {
        "id": str(lv["life_id"]),
        "short": str(lv["life_id"])[-8:],
        "start_reason": lv["start_reason"],
        "end_reason": reason,
        "alive": end is None,
        "failed": reason in LIFE_FAILURES,
        # Where in its bar it went wrong (percent of the bar), when the ledger says; see went_wrong.
        "wrong": None,
        "wrong_note": "",
        "left": left,
        # Where in its bar the life became ready (percent of the bar): before it, it was starting.
        "ready": None
        if ready is None
        else round(min(100.0, (axis.at(float(ready)) - left) / width * 100), 3),
        "width": round(width, 3),
        "age": duration(alive_for),
        "requests": requests,
        "served": served[0],
        "tokens": tokens,
        "ready_seconds": lv["ready_seconds"],
    }
