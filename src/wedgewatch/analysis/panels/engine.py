"""The engine strip under a server's lane: running and waiting requests, KV cache use, tokens per
second and preemptions, from the metric samples the supervisor already takes of each life (only
the series it watches are in the ledger). Each series is cut into ``BUCKETS`` slices of the lane's
time axis in one SQL query per lane (a day of samples is still one query); gauges keep a slice's
highest reading, counters its last, turned into a rate per second between slices."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from wedgewatch.analysis.panels.axis import Axis
from wedgewatch.analysis.rundata import TOKEN_COUNTERS
from wedgewatch.ledger.store import Ledger

BUCKETS = 240

# The series of each row of the strip, by the end of their names, across the servers' profiles
# (vLLM and the simulator, SGLang, llama.cpp): (row, label, kind, name endings).
ROWS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("run", "reqs running", "gauge", ("num_requests_running", "num_running_reqs", "requests_processing")),
    ("wait", "reqs waiting", "gauge", ("num_requests_waiting", "num_queue_reqs", "requests_deferred")),
    ("kv", "KV use", "gauge", ("kv_cache_usage_perc", "token_usage")),
    ("tokens", "tokens/s", "counter", tuple(n.split(":", 1)[1] for n in TOKEN_COUNTERS)),
    ("preempt", "preemptions/s", "counter", ("num_preemptions_total", "num_retracted_reqs")),
)


def _row_of(name: str) -> int | None:
    tail = name.split(":", 1)[-1]
    for i, (_, _, _, ends) in enumerate(ROWS):
        if tail in ends:
            return i
    return None


def strips(ledger: Ledger, lanes: Sequence[Sequence[str]], axis: Axis) -> list[list[dict[str, Any]]]:
    """For each lane (its life ids), the rows of its strip that have data: each with its label,
    its highest value and an SVG polyline's points (x 0-100, y 0-20, up is more)."""
    width = (axis.t1 - axis.t0) / BUCKETS
    out: list[list[dict[str, Any]]] = []
    for life_ids in lanes:
        if not life_ids:
            out.append([])
            continue
        marks = ", ".join("?" * len(life_ids))
        rows = ledger.query(
            f"SELECT name, CAST((ts - ?) / ? AS INTEGER) AS b, MAX(value), MIN(ts), life_id "
            f"FROM metric_samples WHERE life_id IN ({marks}) AND ts >= ? GROUP BY name, life_id, b",
            (axis.t0, width, *life_ids, axis.t0),
        )
        series: dict[int, dict[str, dict[int, float]]] = {}
        for name, bucket, value, _, life in rows:
            i = _row_of(str(name))
            if i is not None:
                series.setdefault(i, {}).setdefault(str(life), {})[int(bucket)] = float(value)
        out.append([_row(i, series[i], width) for i in sorted(series)])
    return out


def _row(i: int, by_life: dict[str, dict[int, float]], width: float) -> dict[str, Any]:
    key, label, kind, _ = ROWS[i]
    points: dict[int, float] = {}
    for buckets in by_life.values():
        ordered = sorted(buckets.items())
        if kind == "counter":
            # A rate between consecutive slices of one life; a new life's counter starts at 0.
            ordered = [
                (b, max(0.0, (v - pv) / ((b - pb) * width)))
                for (pb, pv), (b, v) in itertools.pairwise(ordered)
            ]
        for b, v in ordered:
            points[b] = max(points.get(b, 0.0), v)
    top = max(points.values(), default=0.0)
    scale = top if top > 0 else 1.0
    xy = " ".join(
        f"{min(BUCKETS, b) * 100 / BUCKETS:.2f},{20 - v / scale * 18:.2f}" for b, v in sorted(points.items())
    )
    shown = (
        f"{top * 100:.0f}%" if key == "kv" and top <= 1.0 else f"{top:,.1f}" if top < 10 else f"{top:,.0f}"
    )
    return {"key": key, "label": label, "top": shown, "points": xy}
