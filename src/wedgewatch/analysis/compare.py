"""Two runs side by side: per-instance outcomes, resolved rates and their difference with a
confidence interval, a paired test on the instances both ran, and the infrastructure's rates.

Scores never fold infrastructure in: the rate over all instances and the rate over instances with
a model outcome are both shown, with ``infra_failed`` and ``pending`` beside them.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from wedgewatch.analysis import confounds, stats, twogroups
from wedgewatch.analysis.lives import WEDGE_ENDINGS
from wedgewatch.analysis.summary import summarise
from wedgewatch.analysis.survival import life_ages
from wedgewatch.analysis.text import points, rate_text, table
from wedgewatch.base.vocab import (
    API_ERROR,
    HARNESS_ERROR,
    INFRA_FAILED,
    INTERRUPTED,
    MODEL_OUTCOMES,
    OUTCOMES,
    PENDING,
    RECOVERED,
    RESOLVED,
    RESUMED,
    STALL_KINDS,
)
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger

LETTERS = ("A", "B")


def _infra(s: dict[str, Any]) -> dict[str, Any]:
    by = s["attempts"]["by_status"]
    n = s["instances"]
    return {
        "instances": n,
        INFRA_FAILED: s["outcomes"][INFRA_FAILED],
        PENDING: s["outcomes"][PENDING],
        RECOVERED: s.get(RECOVERED, 0),
        "attempts": s["attempts"]["total"],
        "api_error_attempts": by[API_ERROR],
        "api_error_per_instance": (by[API_ERROR] / n) if n else None,
        "harness_error_attempts": by[HARNESS_ERROR],
        "interrupted_attempts": by[INTERRUPTED],
        "stalls": s["stalls"],
        RESUMED: s.get(RESUMED, 0),
        "restarts": s["server"]["restarts"],
        "wedges": s["server"]["wedges"],
        "crashes": s["server"]["crashes"],
        "infra_seconds": s["infra_time"]["attempt_seconds"] + s["infra_time"]["restart_seconds"],
    }


def _difference(ra: dict[str, Any], rb: dict[str, Any]) -> dict[str, Any]:
    """B minus A with Newcombe's hybrid score interval."""
    d, lo, hi = stats.newcombe_diff(rb["k"], rb["n"], ra["k"], ra["n"])
    if math.isnan(d):
        return {"diff": None, "ci95": None, "detectable": None}
    pooled = (ra["k"] + rb["k"]) / (ra["n"] + rb["n"])
    return {
        "diff": d,
        "ci95": [lo, hi],
        "detectable": stats.detectable_difference(ra["n"], rb["n"], pooled),
    }


def _wedged_lives(ledger: Ledger, run_id: str) -> tuple[int, int]:
    lives, _ = life_ages(ledger, [run_id], "requests", WEDGE_ENDINGS)
    return sum(1 for lv in lives if lv.failed), len(lives)


def _independent(
    sa: dict[str, Any], sb: dict[str, Any], wa: tuple[int, int], wb: tuple[int, int]
) -> dict[str, Any]:
    """Fisher's exact test on what is not paired: infra_failed instances, and wedged lives."""
    return {
        INFRA_FAILED: twogroups.two_groups(
            sa["outcomes"][INFRA_FAILED], sa["instances"], sb["outcomes"][INFRA_FAILED], sb["instances"]
        ),
        "wedged_lives": twogroups.two_groups(wa[0], wa[1], wb[0], wb[1]),
    }


def _paired(common: list[str], oa: dict[str, Any], ob: dict[str, Any]) -> dict[str, Any]:
    """McNemar's exact test on the instances both runs finished with a model outcome."""
    both = [i for i in common if oa[i]["outcome"] in MODEL_OUTCOMES and ob[i]["outcome"] in MODEL_OUTCOMES]
    only_a = sum(1 for i in both if oa[i]["outcome"] == RESOLVED and ob[i]["outcome"] != RESOLVED)
    only_b = sum(1 for i in both if ob[i]["outcome"] == RESOLVED and oa[i]["outcome"] != RESOLVED)
    both_res = sum(1 for i in both if oa[i]["outcome"] == ob[i]["outcome"] == RESOLVED)
    return {
        "instances": len(both),
        "both_resolved": both_res,
        "only_a_resolved": only_a,
        "only_b_resolved": only_b,
        "neither_resolved": len(both) - both_res - only_a - only_b,
        "mcnemar_exact_p": stats.mcnemar_exact(only_a, only_b) if both else None,
    }


def compare(ledger_a: Ledger, run_a: str, ledger_b: Ledger, run_b: str) -> dict[str, Any]:
    """Everything ``wedgewatch compare`` prints, as a JSON-ready dict. BadInput (naming the
    ledger and the run) when either run does not exist."""
    sa, sb = summarise(ledger_a, run_a), summarise(ledger_b, run_b)
    rows_a = {r["instance_id"]: dict(r) for r in queries.instance_outcomes(ledger_a, sa["run_id"])}
    rows_b = {r["instance_id"]: dict(r) for r in queries.instance_outcomes(ledger_b, sb["run_id"])}
    common = [i for i in rows_a if i in rows_b]
    per_instance = [
        {
            "instance_id": i,
            "a": rows_a[i]["outcome"],
            "b": rows_b[i]["outcome"],
            "a_attempts": rows_a[i]["n_attempts"],
            "b_attempts": rows_b[i]["n_attempts"],
            "a_api_errors": rows_a[i]["n_api_error"],
            "b_api_errors": rows_b[i]["n_api_error"],
        }
        for i in common
    ]
    crosstab = Counter(f"{r['a']}|{r['b']}" for r in per_instance)
    result: dict[str, Any] = {
        "a": {"run_id": sa["run_id"], "ledger": str(ledger_a.path), "config_hash": sa["config_hash"]},
        "b": {"run_id": sb["run_id"], "ledger": str(ledger_b.path), "config_hash": sb["config_hash"]},
        "instances": {
            "a": sa["instances"],
            "b": sb["instances"],
            "common": len(common),
            "only_a": sa["instances"] - len(common),
            "only_b": sb["instances"] - len(common),
        },
        "outcomes": {"a": sa["outcomes"], "b": sb["outcomes"]},
        "rates": {
            "all": {"a": sa["resolved_rate_all"], "b": sb["resolved_rate_all"]},
            "model": {"a": sa["resolved_rate_model"], "b": sb["resolved_rate_model"]},
        },
        "difference": {
            "all": _difference(sa["resolved_rate_all"], sb["resolved_rate_all"]),
            "model": _difference(sa["resolved_rate_model"], sb["resolved_rate_model"]),
        },
        "paired": _paired(common, rows_a, rows_b),
        "infrastructure": {"a": _infra(sa), "b": _infra(sb)},
        "independent": _independent(
            sa, sb, _wedged_lives(ledger_a, sa["run_id"]), _wedged_lives(ledger_b, sb["run_id"])
        ),
        "config_diff": confounds.diff(
            confounds.run_facts(ledger_a, sa["run_id"]), confounds.run_facts(ledger_b, sb["run_id"])
        ),
        "crosstab": dict(sorted(crosstab.items())),
        "per_instance": per_instance,
    }
    result["verdict"] = verdict(result)
    return result


def verdict(r: dict[str, Any]) -> list[str]:
    """Plain sentences: what the data can say, and what it cannot."""
    out: list[str] = []
    ra, rb = r["rates"]["model"]["a"], r["rates"]["model"]["b"]
    inf_a, inf_b = r["infrastructure"]["a"], r["infrastructure"]["b"]
    if not ra["n"] or not rb["n"]:
        empty = "A" if not ra["n"] else "B"
        return [f"Run {empty} has no instance with a model outcome yet: there is no score to compare."]
    d = r["difference"]["model"]
    lo, hi = d["ci95"]
    if lo > 0 or hi < 0:
        more = "B" if d["diff"] > 0 else "A"
        out.append(
            f"Run {more} resolves more of the instances that reached a model outcome: B - A = "
            f"{points(d['diff'])} (95% CI {points(lo)} to {points(hi)}), an interval that excludes 0."
        )
    else:
        out.append(
            f"The data cannot tell the two runs apart: B - A = {points(d['diff'])} over instances "
            f"with a model outcome (95% CI {points(lo)} to {points(hi)}, which includes 0). With "
            f"n = {ra['n']} and {rb['n']}, a difference smaller than about "
            f"{d['detectable'] * 100:.0f} pts would usually go unseen (80% power at α 0.05)."
        )
    p = r["paired"]
    if p["instances"]:
        disc = p["only_a_resolved"] + p["only_b_resolved"]
        sentence = (
            f"On the {p['instances']} instances both runs finished, they disagree on {disc} "
            f"(only A resolved {p['only_a_resolved']}, only B {p['only_b_resolved']}); McNemar's "
            f"exact p = {p['mcnemar_exact_p']:.3g}"
        )
        if disc < 6:  # 2 x 0.5^5 = 0.0625: five one-sided pairs cannot reach 0.05
            sentence += ": with so few discordant pairs no p-value below 0.05 is possible"
        out.append(sentence + ".")
    for letter, inf in zip(LETTERS, (inf_a, inf_b), strict=True):
        if inf[INFRA_FAILED] or inf["api_error_attempts"]:
            out.append(
                f"Run {letter} lost {inf[INFRA_FAILED]} instance(s) to the infrastructure "
                f"(infra_failed) and had {inf['api_error_attempts']} api_error attempt(s), "
                f"{inf['restarts']} restart(s): those instances are left out of the model-outcome "
                "rate, not counted as the model's failures."
            )
        if inf[PENDING]:
            out.append(f"Run {letter} has {inf[PENDING]} pending instance(s): its rates may still change.")
    da = r["difference"]["all"]
    if (
        da["diff"] is not None
        and d["diff"] is not None
        and (da["diff"] > 0) != (d["diff"] > 0)
        and da["diff"]
    ):
        out.append(
            "Over all instances the difference points the other way: the infrastructure, not the "
            "model, accounts for it."
        )
    for key, what in ((INFRA_FAILED, "infra_failed instances"), ("wedged_lives", "wedged server lives")):
        said = twogroups.sentence(r["independent"][key], what)
        if said:
            out.append(said)
    confound = confounds.sentence(r["config_diff"])
    if confound:
        out.append(confound)
    n = r["instances"]
    if n["only_a"] or n["only_b"]:
        out.append(
            f"The runs share {n['common']} instance(s) ({n['only_a']} only in A, {n['only_b']} only "
            "in B): the rates are over different sets; the paired test uses the shared ones."
        )
    return out


def render_text(r: dict[str, Any]) -> str:
    a, b = r["a"], r["b"]
    lines = [f"A: run {a['run_id']} ({a['ledger']})", f"B: run {b['run_id']} ({b['ledger']})", ""]
    lines.append(f"per instance ({r['instances']['common']} run by both):")
    lines += table(
        ["instance", "A", "B", "A attempts", "B attempts", "A api_err", "B api_err"],
        [
            [
                p["instance_id"],
                p["a"],
                p["b"] + ("  *" if p["a"] != p["b"] else ""),
                p["a_attempts"],
                p["b_attempts"],
                p["a_api_errors"],
                p["b_api_errors"],
            ]
            for p in r["per_instance"]
        ],
    )
    lines += ["", "outcomes:"]
    lines += table(
        ["run", *OUTCOMES], [[x, *(r["outcomes"][x.lower()][k] for k in OUTCOMES)] for x in LETTERS]
    )
    lines += ["", "resolved rate:"]
    for key, label in (("model", "over model outcomes"), ("all", "over all instances")):
        d = r["difference"][key]
        diff = (
            f"{points(d['diff'])} (95% CI {points(d['ci95'][0])} to {points(d['ci95'][1])})"
            if d["diff"] is not None
            else "n/a"
        )
        lines.append(f"  {label}:")
        lines.append(f"    A  {rate_text(r['rates'][key]['a'])}")
        lines.append(f"    B  {rate_text(r['rates'][key]['b'])}")
        lines.append(f"    B - A  {diff}  (Newcombe hybrid score)")
    p = r["paired"]
    if p["instances"]:
        lines.append(
            f"  paired ({p['instances']} instances with a model outcome in both): both resolved "
            f"{p['both_resolved']}, only A {p['only_a_resolved']}, only B {p['only_b_resolved']}, "
            f"neither {p['neither_resolved']}; McNemar exact p = {p['mcnemar_exact_p']:.3g}"
        )
    ia, ib = r["infrastructure"]["a"], r["infrastructure"]["b"]
    lines += ["", "infrastructure:"]
    rows: list[list[Any]] = [
        ["infra_failed instances", ia[INFRA_FAILED], ib[INFRA_FAILED]],
        ["pending instances", ia[PENDING], ib[PENDING]],
        ["recovered instances (the agent's retry)", ia[RECOVERED], ib[RECOVERED]],
        ["attempts", ia["attempts"], ib["attempts"]],
        ["api_error attempts", ia["api_error_attempts"], ib["api_error_attempts"]],
        ["api_error per instance", ia["api_error_per_instance"], ib["api_error_per_instance"]],
        ["harness_error attempts", ia["harness_error_attempts"], ib["harness_error_attempts"]],
    ]
    rows += [[f"stalls: {k}", ia["stalls"][k], ib["stalls"][k]] for k in STALL_KINDS]
    rows += [
        ["requests resumed on the next life", ia[RESUMED], ib[RESUMED]],
        ["server restarts", ia["restarts"], ib["restarts"]],
        ["wedges detected", ia["wedges"], ib["wedges"]],
        ["seconds lost", round(ia["infra_seconds"], 1), round(ib["infra_seconds"], 1)],
    ]
    lines += table(["", "A", "B"], rows)
    ind = r["independent"]
    lines += ["", "independent groups (Fisher's exact test):"]
    lines += twogroups.render(ind[INFRA_FAILED], "infra_failed instances")
    lines += twogroups.render(ind["wedged_lives"], "server lives that wedged (wedge or api_errors restart)")
    lines += ["", "configuration:"]
    if r["config_diff"]:
        lines += table(["factor", "A", "B"], confounds.render_rows(r["config_diff"]))
    else:
        lines.append("  the two runs' configurations do not differ")
    lines += ["", *r["verdict"]]
    return "\n".join(lines)


__all__ = ["compare", "render_text", "verdict"]
