"""``wedgewatch lives``: how long a server life lasts before it wedges, and the recycling
interval that keeps the risk of a wedge per life below a chosen share.

A life *fails* when it wedged: the supervisor's ``wedge``, or a restart after consecutive API
errors whose last canary did not answer (survival.py: how most wedges end in practice). Every
other ending is censored at the age it reached: recycled, stopped at the end of the run, crashed,
still running. Ages are in ``requests`` or ``tokens`` (survival.py), or in ``instances``: the
instances a life finished (attempts that ended model-side on it) before it failed or ended, the
unit ``recycle_every_instances`` counts.

The recycling interval for a risk ``r`` is the Kaplan–Meier quantile: the first age at which the
estimate of lives still serving falls below ``1 - r``, with the confidence interval statsmodels'
``SurvfuncRight.quantile_ci`` gives (inverting the log(-log) test, as SAS does). Recycling
every N means a life is restarted when it reaches age N, so only the lives that wedged younger
than N are not prevented: at the quantile that share is below ``r``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from wedgewatch.analysis.survival import Survival, kaplan_meier, life_ages
from wedgewatch.analysis.survival import render_text as survival_text
from wedgewatch.base.vocab import API_ERRORS, MODEL_SIDE, WEDGE, sql_list
from wedgewatch.ledger.store import Ledger

WEDGE_ENDINGS = (WEDGE, API_ERRORS)
AXES = ("instances", "requests", "tokens")
# The setting each axis's interval goes into (requests have none: the supervisor does not count
# them toward recycling).
SETTING = {"instances": "recycle_every_instances", "tokens": "recycle_every_tokens"}


def _instances_by_life(ledger: Ledger, run_id: str) -> dict[str, list[float]]:
    """The end times of the model-side attempts of each life of the run."""
    out: dict[str, list[float]] = {}
    for r in ledger.query(
        f"SELECT life_id, ended_at FROM attempt_view WHERE run_id = ? AND status IN ({sql_list(MODEL_SIDE)}) "
        "AND life_id IS NOT NULL",
        (run_id,),
    ):
        out.setdefault(r["life_id"], []).append(float(r["ended_at"]))
    return out


def survival_by(ledger: Ledger, run_ids: Sequence[str], by: str) -> Survival:
    """The Kaplan–Meier curve of the runs' lives to a wedge, by age in ``by``."""
    if by not in AXES:
        raise ValueError(f"by must be one of {', '.join(AXES)}, not {by!r}")
    axis = "seconds" if by == "instances" else by
    lives, not_ready = life_ages(ledger, run_ids, axis, WEDGE_ENDINGS)
    if by == "instances":
        started = {
            r["life_id"]: float(r["started_at"])
            for rid in run_ids
            for r in ledger.query("SELECT life_id, started_at FROM server_lives WHERE run_id = ?", (rid,))
        }
        done = {rid: _instances_by_life(ledger, rid) for rid in run_ids}
        # The age in seconds says when the life failed or ended; the instances it had finished by
        # then are its age in instances.
        lives = [
            replace(
                lv,
                age=float(
                    sum(1 for t in done[lv.run_id].get(lv.life_id, []) if t <= started[lv.life_id] + lv.age)
                ),
            )
            for lv in lives
        ]
    km = kaplan_meier([lv.age for lv in lives], [lv.failed for lv in lives])
    return Survival(axis=by, lives=lives, failure_reasons=WEDGE_ENDINGS, not_ready=not_ready, **km)


def interval(sv: Survival, risk: float) -> dict[str, Any]:
    """The recycling interval at ``risk``: the quantile of the age at a wedge and its 95% CI
    (statsmodels); None where the estimate never falls that far (too few wedges)."""
    out: dict[str, Any] = {"risk": risk, "interval": None, "ci95": None, "longest_age": None}
    if sv.lives:
        out["longest_age"] = max(lv.age for lv in sv.lives)
    if not sv.times:
        return out
    import numpy as np
    from statsmodels.duration.survfunc import SurvfuncRight

    sf = SurvfuncRight(
        np.array([lv.age for lv in sv.lives], dtype=float),
        np.array([lv.failed for lv in sv.lives], dtype=float),
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        q = float(sf.quantile(risk))
        lo, hi = (float(x) for x in sf.quantile_ci(risk))
    if math.isnan(q):
        return out
    out["interval"] = q
    out["ci95"] = [None if math.isnan(lo) else lo, None if math.isnan(hi) or math.isinf(hi) else hi]
    return out


def sentence(sv: Survival, iv: dict[str, Any]) -> str:
    """What to do with it, in one or two plain sentences."""
    pct = f"{iv['risk'] * 100:g}%"
    if iv["interval"] is None:
        longest = iv["longest_age"]
        seen = f" (the oldest life reached {longest:g} {sv.axis})" if longest is not None else ""
        return (
            f"Fewer than {pct} of these lives wedged at any age observed{seen}: the data give no "
            "recycling interval at that risk. More lives, or older ones, would."
        )
    q = float(iv["interval"])
    n = int(q)
    lo, hi = iv["ci95"]
    ci = (
        f"; 95% CI {lo:g} to {'beyond the oldest life' if hi is None else f'{hi:g}'}"
        if lo is not None
        else "; too few lives for a 95% interval"
    )
    # The estimate steps at failure ages, so the share at the quantile can be far past the risk
    # asked for (3 of 6 lives wedging at one age: 50%); say both it and the share before it, which
    # is what recycling at that age leaves.
    by, before = 1 - sv.at(q), 1 - sv.at(math.nextafter(q, -math.inf))
    head = (
        f"By {n:g} {sv.axis}, {by:.1%} of lives had wedged, {before:.1%} before it: the first age at "
        f"which the estimate passes {pct}{ci}."
    )
    setting = SETTING.get(sv.axis)
    if n <= 0:
        return head + " Lives wedge before finishing any work: recycling cannot bring the risk that low."
    if setting is None:
        return (
            head
            + " No setting recycles by requests; use --by tokens (or, for a run, --by instances) for one."
        )
    tail = f" Put in [server]: {setting} = {n}"
    if lo is not None and lo < n:
        tail += f" ({setting} = {int(lo)} is the cautious end of the interval)"
    return head + tail + "."


def render_text(sv: Survival, iv: dict[str, Any]) -> str:
    text = survival_text(sv).replace("survival of server lives", "server lives until a wedge", 1)
    return text + "\n" + sentence(sv, iv)


__all__ = ["AXES", "WEDGE_ENDINGS", "interval", "render_text", "sentence", "survival_by"]
