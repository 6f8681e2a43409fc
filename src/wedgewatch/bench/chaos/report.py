"""What ``bench chaos`` prints: one seed's faults and invariants, and the table docs/reliability.md
quotes (one row per seed)."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from wedgewatch.bench.chaos.checker import INVARIANTS


def _fault_class(report: dict[str, Any], d: dict[str, Any]) -> str:
    """``in flight`` (a request running on the engine was struck), ``struck`` (an attempt or the
    runner), ``nothing`` (dealt, struck nothing), ``skipped`` (never dealt)."""
    if d["at"] is None:
        return "skipped"
    hit = report["figures"]["struck"].get(str(d["n"])) or report["figures"]["struck"].get(d["n"]) or {}
    if hit.get("requests"):
        return "in flight"
    if hit.get("attempts") or d["kind"] in ("kill_runner", "freeze_then_kill_runner"):
        return "struck"
    return "nothing"


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} / {max(values):.1f}"


def row(report: dict[str, Any]) -> dict[str, Any]:
    """One seed's line of the table, as values."""
    dealt = report["run"]["dealt"]
    classes = Counter(_fault_class(report, d) for d in dealt)
    fig = report["figures"]
    broken = Counter(b["invariant"] for b in report["broken"])
    # Memory is a process's: the runner that lived through the most faults, first and last look.
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for sample in report["run"]["samples"]:
        by_pid.setdefault(sample["pid"], []).append(sample)
    longest = max(by_pid.values(), key=len, default=[])
    first = longest[0] if longest else None
    last = longest[-1] if longest else None
    replies = fig["replies"]
    total = replies["equal"] + replies["differing"] + replies["unmatched"]
    return {
        "seed": report["seed"],
        "faults": len(dealt),
        "kinds": dict(Counter(d["kind"] for d in dealt if d["at"] is not None)),
        "in_flight": classes["in flight"],
        "struck": classes["struck"],
        "nothing": classes["nothing"],
        "skipped": classes["skipped"],
        "instances": fig["instances"],
        "outcomes_equal": fig["outcomes_equal"],
        "replies_equal": replies["equal"] + replies["accepted"],
        "replies": total,
        "rows_lost": broken["rows_lost"],
        "left": broken["nothing_left"],
        "settled": _spread([d["settled"] for d in dealt if d["settled"] is not None]),
        "added": _spread([a["added"] for a in fig["added"]]),
        "memory": "-"
        if first is None or last is None
        else f"{first['rss_mib']:.0f} -> {last['rss_mib']:.0f} MiB",
        "fds": "-" if first is None or last is None else f"{first['fds']} -> {last['fds']}",
        "runner_deaths": len(report["run"]["deaths"]),
        "held": [name for name in INVARIANTS if not broken[name]],
        "broken": {name: broken[name] for name in INVARIANTS if broken[name]},
    }


def table(reports: list[dict[str, Any]]) -> list[str]:
    """The table docs/reliability.md shows: a row per seed."""
    head = (
        "| seed | faults (in flight / struck / nothing / skipped) | instances | outcomes equal | replies equal "
        "| rows lost | left | serving again, s (median / max) | struck request added, s (median / max) "
        "| runner RSS | runner fds | runner deaths | invariants broken |"
    )
    lines = [head, "|" + "---|" * 13]
    for rep in reports:
        r = row(rep)
        broken = ", ".join(f"{k} ({v})" for k, v in r["broken"].items()) or "none"
        lines.append(
            f"| {r['seed']} | {r['faults']} ({r['in_flight']} / {r['struck']} / {r['nothing']} / {r['skipped']}) "
            f"| {r['instances']} | {r['outcomes_equal']} of {r['instances']} | {r['replies_equal']} of {r['replies']} "
            f"| {r['rows_lost']} | {r['left']} | {r['settled']} | {r['added']} | {r['memory']} | {r['fds']} "
            f"| {r['runner_deaths']} | {broken} |"
        )
    return lines


def lines(report: dict[str, Any]) -> list[str]:
    """One seed, in full: the control, each fault, each broken invariant with its replay."""
    c = report["control"]
    out = [
        f"control: two fault-free runs, {c['instances']} instances: outcomes equal {c['outcomes_equal']} of "
        f"{c['instances']}, replies equal {c['replies_equal']}, differing {c['replies_differing']}, requests "
        f"unmatched {c['requests_unmatched']} ({'holds' if c['holds'] else 'does NOT hold'})",
    ]
    out += [f"  control departs: {w}" for w in c["first_departures"]]
    out.append(f"faults (seed {report['seed']}):")
    for d in report["run"]["dealt"]:
        what = "; ".join(d["did"]) if d["at"] is not None else f"not dealt: {d['skipped']}"
        settled = "" if d["settled"] is None else f", serving again after {d['settled']:.1f} s"
        out.append(f"  #{d['n']:<3}{d['kind']:<24}at {d['tokens']:>6} tokens: {what}{settled}")
    for death in report["run"]["deaths"]:
        out.append(
            f"  the runner ended by itself (exit {death['code']}): {death['tail'].strip().splitlines()[-1:]}"
        )
    r = row(report)
    out.append("invariants: " + ", ".join(f"{n} held" for n in r["held"]))
    for b in report["broken"]:
        out.append(f"BROKEN {b['invariant']}: {b['what']} [{b['fault']}]")
    if report["broken"]:
        out.append(f"replay: {report['replay']}")
    return out
