"""The demo's table: each arm's cells over seeds as median [min-max], and the rows printed."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from wedgewatch.base.vocab import INFRA_FAILED
from wedgewatch.config.scaled import SCALED_FLOOR
from wedgewatch.demo.cells import KEYS


def aggregate(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{key: {"median", "min", "max"}}`` over an arm's runs (one per seed)."""
    out: dict[str, dict[str, float]] = {}
    for key in KEYS:
        values = [float(r[key]) for r in runs]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


def _num(x: float, decimals: int = 0) -> str:
    if not decimals and x != int(x):
        decimals = 1  # a median of an even number of seeds: 9.5, not a rounded 10
    return f"{x:,.{decimals}f}" if decimals else f"{int(x):,}"


def cell(agg: dict[str, dict[str, float]], key: str, decimals: int = 0) -> str:
    """``7`` for one seed (or when every seed agrees), else ``7 [5-8]``."""
    c = agg[key]
    med = _num(c["median"], decimals)
    if c["min"] == c["max"]:
        return med
    return f"{med} [{_num(c['min'], decimals)}-{_num(c['max'], decimals)}]"


def _hangs(agg: dict[str, dict[str, float]]) -> str:
    if agg["hung_attempts"]["max"] == 0:
        return "none"
    return f"{cell(agg, 'hung_attempts')} x {cell(agg, 'hang_server_seconds_each', 1)} s"


Row = tuple[str, Callable[[dict[str, Any]], str]]

ROWS: list[Row] = [
    ("true resolved (the model's skill)", lambda a: cell(a["cells"], "true_resolved")),
    (
        "published score",
        lambda a: f"{cell(a['cells'], 'published_resolved')} / {cell(a['cells'], 'published_of')}",
    ),
    ("  true resolved on those instances", lambda a: cell(a["cells"], "true_resolved_on_published")),
    ("  hidden by hangs", lambda a: cell(a["cells"], "hidden_by_hangs")),
    ("scored as model failures", lambda a: cell(a["cells"], "scored_as_model_failures")),
    ("  of which were hangs", lambda a: cell(a["cells"], "of_which_hangs")),
    (
        INFRA_FAILED,
        lambda a: (
            cell(a["cells"], INFRA_FAILED) + (" (apart)" if a["reports_infra_apart"] else " (in the score)")
        ),
    ),
    ("stalls caught by the proxy", lambda a: cell(a["cells"], "stalls")),
    ("wedges detected", lambda a: cell(a["cells"], "wedges")),
    ("server restarts", lambda a: cell(a["cells"], "restarts")),
    ("retried attempts", lambda a: cell(a["cells"], "retried_attempts")),
    ("hangs at real speed (server s)", lambda a: _hangs(a["cells"])),
    ("wall-clock here (s)", lambda a: cell(a["cells"], "wall_seconds", 1)),
]


def table_rows(arms: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    """(label, one cell per arm) rows, arms in the order run."""
    return [(label, *(fn(a) for a in arms)) for label, fn in ROWS]


def footnote(time_scale: float, seeds: int) -> str:
    spread = f" Cells are the median over {seeds} seeds [min-max]." if seeds > 1 else ""
    floor = ""
    if time_scale > 1:
        # Without this, a guarded arm's hang of ~200 server s at 200x reads as its detection time.
        floor = (
            f" Scaled deadlines never drop below {SCALED_FLOOR:g} s of real time (this machine's own"
            f" scheduling noise), so a hang ended by a deadline counts at least {SCALED_FLOOR * time_scale:,.0f}"
            " server s here, whatever that deadline is at real speed."
        )
    return (
        f"Simulated at {time_scale:g}x: a hang's server seconds are real seconds x {time_scale:g}, "
        "the time its unanswered requests waited (the SDK's backoff between retries is not in it)."
        + floor
        + spread
    )
