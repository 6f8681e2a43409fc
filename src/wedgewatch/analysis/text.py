"""Plain-text rendering shared by the analysis commands: aligned tables and rates."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "  ") -> list[str]:
    """Left-aligned text columns (numbers right-aligned), one string per line."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, v in enumerate(row):
            widths[i] = max(widths[i], len(v))
    numeric = [all(_is_num(r[i]) for r in rows) and bool(rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return (indent + "  ".join(parts)).rstrip()

    return [line(list(headers)), line(["-" * w for w in widths]), *(line(r) for r in cells)]


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.1f}"
    return str(v)


def pct(x: float | None, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"


def rate_text(r: dict[str, Any]) -> str:
    """``k/n = 60.0% (95% CI 38.7%–78.1%)`` from a ``stats.rate`` dict."""
    if not r["n"]:
        return "n/a (nothing to count)"
    lo, hi = r["ci95"]
    return f"{r['k']}/{r['n']} = {pct(r['rate'])} (95% CI {pct(lo)}–{pct(hi)})"


def points(x: float) -> str:
    """A difference of proportions in percentage points."""
    if math.isnan(x):
        return "n/a"
    v = x * 100
    return f"{0.0 if abs(v) < 0.05 else v:+.1f} pts"  # never "-0.0"
