"""Main effects of a finished design on the per-attempt api_error (wedge) rate.

Each run is a cell; its factor levels come from its config snapshot. The outcome is per
attempt: ``api_error`` (the LLM path failed: a stall, a wedge, a restart) against a model-side
ending (``submitted``, ``early_stop``); ``harness_error``, ``interrupted`` and attempts without an
end are left out and counted.

Two estimates per factor:
- the difference in pooled api_error rate between its two levels, with Newcombe's interval
  (robust to cells with no api_error at all, which a good procedure produces);
- a binomial GLM on the cells with a complementary log-log link and every factor at once: if
  each request wedges the server with a small hazard that each factor multiplies (the
  simulator's model, and the natural reading of "a used server is N times as likely to wedge"),
  then P(api_error) = 1 - exp(-H) and cloglog(P) = log H is linear in the factors, so exp(coef)
  is the factor's hazard ratio. Cells with 0 or all api_errors get 0.5 added to both counts (the
  empirical-logit correction) so that the estimate stays finite; that shrinks extreme effects.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

from wedgewatch.analysis import stats
from wedgewatch.analysis.plan.factors import KNOWN, Factor
from wedgewatch.analysis.text import points, table
from wedgewatch.base.errors import BadInput
from wedgewatch.base.vocab import API_ERROR, MODEL_SIDE, WEDGE
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger

_PART_OF_FLAGS = ("prefix_caching", "eager")  # read from the hybrid-safe set: no news when flags varies
Z95 = 1.959963984540054


def _cell(ledger: Ledger, run_id: str) -> dict[str, Any]:
    rows = ledger.query(
        "SELECT status, COUNT(*) AS n FROM attempt_view WHERE run_id = ? GROUP BY status", (run_id,)
    )
    by = {r["status"]: int(r["n"]) for r in rows}
    events = queries.events_by_kind(ledger, run_id)
    k = by.get(API_ERROR, 0)
    n = k + sum(by.get(s, 0) for s in MODEL_SIDE)
    return {API_ERROR: k, "attempts": n, "left_out": sum(by.values()) - n, "wedges": events.get(WEDGE, 0)}


def analyse(ledger: Ledger, run_ids: list[str], extra: list[Factor] | None = None) -> dict[str, Any]:
    if len(run_ids) < 2:
        raise BadInput("--analyse: give the run ids of at least two cells of a design")
    if len(set(run_ids)) != len(run_ids):
        twice = next(r for r in run_ids if run_ids.count(r) > 1)
        raise BadInput(f"--analyse: run {twice!r} is given twice")
    runs = [queries.resolve_run(ledger, rid) for rid in run_ids]  # BadInput names a missing run
    snaps = [json.loads(r["config_json"]) for r in runs]
    candidates = {**KNOWN, **{f.name: f for f in extra or []}}
    varying: list[tuple[Factor, Any, Any]] = []  # factor, reference level, other level
    held: dict[str, Any] = {}
    for f in candidates.values():
        vals = [f.read(s) for s in snaps]
        distinct = list(dict.fromkeys(json.dumps(v) for v in vals))
        if len(distinct) == 1:
            held[f.name] = vals[0]
            continue
        if len(distinct) > 2:
            raise BadInput(
                f"--analyse: factor {f.name} takes {len(distinct)} levels across these runs "
                f"({', '.join(distinct)}); main effects need two"
            )
        seen = [json.loads(x) for x in distinct]
        ref = f.levels[0] if f.levels[0] in seen else seen[0]
        varying.append((f, ref, next(v for v in seen if v != ref)))
    if not varying:
        raise BadInput("--analyse: these runs share every factor level; there is nothing to estimate")
    cells = []
    for rid, snap in zip(run_ids, snaps, strict=True):
        c = _cell(ledger, rid)
        c["run_id"] = rid
        c["levels"] = {f.name: f.read(snap) for f, _, _ in varying}
        c["rate"] = stats.rate(c[API_ERROR], c["attempts"])
        cells.append(c)
    x = {f.name: [0 if c["levels"][f.name] == ref else 1 for c in cells] for f, ref, _ in varying}
    estimable, aliased = _distinct_columns(x)
    effects = []
    for f, ref, alt in varying:
        if f.name not in estimable:
            continue
        at = [c for c, v in zip(cells, x[f.name], strict=True) if v == 1]
        rf = [c for c, v in zip(cells, x[f.name], strict=True) if v == 0]
        k1, n1 = sum(c[API_ERROR] for c in at), sum(c["attempts"] for c in at)
        k0, n0 = sum(c[API_ERROR] for c in rf), sum(c["attempts"] for c in rf)
        d, lo, hi = stats.newcombe_diff(k1, n1, k0, n0)
        effects.append(
            {
                "factor": f.name,
                "reference": ref,
                "other": alt,
                "rate_reference": stats.rate(k0, n0),
                "rate_other": stats.rate(k1, n1),
                "difference": None if math.isnan(d) else d,
                "ci95": None if math.isnan(d) else [lo, hi],
            }
        )
    glm = _glm(cells, {n: x[n] for n in estimable})
    for e in effects:
        e["hazard_ratio"] = glm["factors"].get(e["factor"]) if glm["fitted"] else None
    result = {
        "runs": run_ids,
        "held": held,
        "aliased": aliased,
        "cells": cells,
        "effects": effects,
        "glm": glm,
        "left_out_attempts": sum(c["left_out"] for c in cells),
    }
    result["verdict"] = verdict(result)
    return result


def _distinct_columns(x: dict[str, list[int]]) -> tuple[list[str], list[str]]:
    """Factors whose columns differ (and are not constant); a repeated or mirrored column is
    aliased with the first factor that has it and cannot be told apart from it."""
    keep: list[str] = []
    notes: list[str] = []
    for name, col in x.items():
        twin = next((k for k in keep if x[k] == col or x[k] == [1 - v for v in col]), None)
        if twin is None:
            keep.append(name)
        elif not (twin == "flags" and name in _PART_OF_FLAGS):
            notes.append(f"{name} changes together with {twin} in these runs: its effect is {twin}'s")
    return keep, notes


def _glm(cells: list[dict[str, Any]], x: dict[str, list[int]]) -> dict[str, Any]:
    names = list(x)
    if len(cells) < len(names) + 1:
        return {"fitted": False, "why": f"{len(cells)} cells for {len(names) + 1} parameters", "factors": {}}
    total_k, total_n = sum(c[API_ERROR] for c in cells), sum(c["attempts"] for c in cells)
    if total_k in (0, total_n):
        return {
            "fitted": False,
            "why": f"{total_k} of {total_n} attempts ended api_error: nothing varies",
            "factors": {},
        }
    import numpy as np
    import statsmodels.api as sm

    succ, fail = [], []
    for c in cells:
        k, n = c[API_ERROR], c["attempts"]
        pad = 0.5 if k in (0, n) else 0.0
        succ.append(k + pad)
        fail.append(n - k + pad)
    exog = np.column_stack([np.ones(len(cells)), *(np.array(x[n], dtype=float) for n in names)])
    family = sm.families.Binomial(link=sm.families.links.CLogLog())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fit = sm.GLM(np.column_stack([succ, fail]), exog, family=family).fit()
        except Exception as exc:  # statsmodels raises a zoo (LinAlgError, PerfectSeparationError, ...)
            return {"fitted": False, "why": f"{type(exc).__name__}: {exc}", "factors": {}}
    if any("separation" in str(w.message).lower() for w in caught):
        return {"fitted": False, "why": "perfect separation: a factor predicts every outcome", "factors": {}}
    out: dict[str, Any] = {}
    for i, name in enumerate(names, start=1):
        b, se = float(fit.params[i]), float(fit.bse[i])
        if not (math.isfinite(b) and math.isfinite(se)):
            return {"fitted": False, "why": "the fit did not converge", "factors": {}}
        out[name] = {
            "log_hr": b,
            "hr": math.exp(b),
            "ci95": [math.exp(b - Z95 * se), math.exp(b + Z95 * se)],
            "p": float(fit.pvalues[i]),
        }
    return {"fitted": True, "link": "cloglog", "factors": out}


def verdict(r: dict[str, Any]) -> list[str]:
    effects = r["effects"]
    glm = r["glm"]
    if glm["fitted"]:
        clear = [e for e in effects if (hr := e["hazard_ratio"]) and not hr["ci95"][0] <= 1 <= hr["ci95"][1]]
        clear.sort(key=lambda e: -abs(e["hazard_ratio"]["log_hr"]))
    else:
        clear = [e for e in effects if e["ci95"] and not e["ci95"][0] <= 0 <= e["ci95"][1]]
        clear.sort(key=lambda e: -abs(e["difference"]))
    out = []
    if not clear:
        out.append("No factor's effect on the api_error rate is distinguishable from zero with these runs.")
    for n, e in enumerate(clear):
        worse = e["other"] if (e["difference"] or 0) > 0 else e["reference"]
        hr = e["hazard_ratio"]
        how = f"; hazard ratio {hr['hr']:.3g}, 95% CI {hr['ci95'][0]:.3g}–{hr['ci95'][1]:.3g}" if hr else ""
        lead = "Most of the work is done by" if n == 0 else "Also clear:"
        out.append(
            f"{lead} {e['factor']}: {e['reference']} -> {e['other']} changes the api_error rate by "
            f"{points(e['difference'])} (95% CI {points(e['ci95'][0])} to {points(e['ci95'][1])}{how}); "
            f"{e['factor']} = {worse} is the worse level."
        )
    unclear = [e["factor"] for e in effects if e not in clear]
    if unclear and clear:
        out.append(f"Not distinguishable from zero: {', '.join(unclear)}.")
    out += r["aliased"]
    out.append(
        "Main effects only: interactions are not estimated (in a fractional design they are aliased), "
        "and attempts of one run share server lives, so the intervals are somewhat too narrow."
    )
    return out


def render_text(r: dict[str, Any]) -> str:
    names = [e["factor"] for e in r["effects"]]
    lines = [f"cells ({len(r['cells'])} runs):"]
    lines += table(
        ["run", *names, "api_error/attempts", "rate", "wedges"],
        [
            [
                c["run_id"],
                *(c["levels"][n] for n in names),
                f"{c[API_ERROR]}/{c['attempts']}",
                c["rate"]["rate"],
                c["wedges"],
            ]
            for c in r["cells"]
        ],
    )
    if r["held"]:
        lines.append("held: " + ", ".join(f"{k} = {v}" for k, v in r["held"].items()))
    lines += ["", "main effects on the per-attempt api_error rate:"]
    rows = []
    for e in r["effects"]:
        hr = e["hazard_ratio"]
        rows.append(
            [
                e["factor"],
                f"{e['reference']} -> {e['other']}",
                f"{e['rate_reference']['k']}/{e['rate_reference']['n']} -> {e['rate_other']['k']}/{e['rate_other']['n']}",
                points(e["difference"]) if e["difference"] is not None else "n/a",
                f"{points(e['ci95'][0])} to {points(e['ci95'][1])}" if e["ci95"] else "n/a",
                f"{hr['hr']:.3g} ({hr['ci95'][0]:.3g}–{hr['ci95'][1]:.3g})" if hr else "n/a",
            ]
        )
    lines += table(["factor", "levels", API_ERROR, "difference", "95% CI", "hazard ratio (95% CI)"], rows)
    if not r["glm"]["fitted"]:
        lines.append(f"  (no GLM: {r['glm']['why']})")
    if r["left_out_attempts"]:
        lines.append(f"  {r['left_out_attempts']} attempt(s) left out (harness_error, interrupted, running)")
    return "\n".join([*lines, "", *r["verdict"]])
