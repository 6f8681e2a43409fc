"""Two independent groups, k1 of n1 against k2 of n2: the rates with their Wilson intervals, the
difference with Newcombe's, and Fisher's exact test. What ``compare`` says about infrastructure
failures and wedged server lives (no instance is paired there: a server life belongs to one run),
and what ``compare --counts 15/15 0/12`` says about a table from elsewhere."""

from __future__ import annotations

import re
from typing import Any

from wedgewatch.analysis import stats
from wedgewatch.analysis.text import pct, points, rate_text
from wedgewatch.base.errors import BadInput

_COUNT = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


def parse_count(text: str, flag: str = "--counts") -> tuple[int, int]:
    """``k/n`` with 0 <= k <= n and n > 0; BadInput naming the flag otherwise."""
    m = _COUNT.fullmatch(text)
    if not m:
        raise BadInput(f"{flag}: {text!r} is not k/n (for example 15/15)")
    k, n = int(m.group(1)), int(m.group(2))
    if n == 0 or k > n:
        raise BadInput(f"{flag}: {text!r}: need 0 <= k <= n and n > 0")
    return k, n


def two_groups(k1: int, n1: int, k2: int, n2: int) -> dict[str, Any]:
    """JSON-ready: both rates, B - A (group 2 minus group 1) and Fisher's p-values; the Fisher
    entries are None when either group is empty."""
    d, lo, hi = stats.newcombe_diff(k2, n2, k1, n1)
    out: dict[str, Any] = {
        "a": stats.rate(k1, n1),
        "b": stats.rate(k2, n2),
        "diff": None if n1 == 0 or n2 == 0 else d,
        "ci95": None if n1 == 0 or n2 == 0 else [lo, hi],
        "fisher_p_two_sided": None,
        "fisher_p_one_sided": None,
    }
    if n1 and n2:
        f = stats.fisher_exact(k1, n1, k2, n2)
        out["fisher_p_two_sided"] = f["p_two_sided"]
        out["fisher_p_one_sided"] = f["p_one_sided"]
    return out


def render(g: dict[str, Any], what: str, names: tuple[str, str] = ("A", "B")) -> list[str]:
    """A few lines: each rate, the difference, Fisher's p-values."""
    lines = [f"  {what}:", f"    {names[0]}  {rate_text(g['a'])}", f"    {names[1]}  {rate_text(g['b'])}"]
    if g["diff"] is None:
        lines.append("    (a group is empty: nothing to test)")
        return lines
    lo, hi = g["ci95"]
    lines.append(f"    {names[1]} - {names[0]}  {points(g['diff'])} (95% CI {points(lo)} to {points(hi)})")
    lean = ">" if g["a"]["rate"] >= g["b"]["rate"] else "<"
    lines.append(
        f"    Fisher's exact test: p = {g['fisher_p_two_sided']:.3g} two-sided, "
        f"p = {g['fisher_p_one_sided']:.3g} one-sided ({names[0]} {lean} {names[1]})"
    )
    return lines


def sentence(g: dict[str, Any], what: str) -> str | None:
    """One verdict sentence when the two groups differ at the 5% level (two-sided)."""
    p = g["fisher_p_two_sided"]
    if p is None or p >= 0.05:
        return None
    more = "A" if g["a"]["rate"] > g["b"]["rate"] else "B"
    return (
        f"Run {more} had more {what} ({pct(g['a']['rate'])} of {g['a']['n']} against "
        f"{pct(g['b']['rate'])} of {g['b']['n']}); Fisher's exact p = {p:.3g} (two-sided)."
    )


__all__ = ["parse_count", "render", "sentence", "two_groups"]
