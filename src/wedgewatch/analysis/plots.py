"""The report's figures, drawn with matplotlib's Agg canvas (no pyplot, no display, no global
state) and returned as ``data:image/png;base64,...`` URIs so the page is one file that fetches
nothing. Each function returns None when the run has nothing to draw; the page says "no data".
"""

from __future__ import annotations

import base64
import heapq
import io
from collections import Counter
from collections.abc import Sequence
from typing import Any

from wedgewatch.analysis.rundata import RunData
from wedgewatch.analysis.survival import Survival
from wedgewatch.base.vocab import (
    API_ERROR,
    API_ERRORS,
    CRASH,
    EARLY_STOP,
    FIRST_LIFE,
    HARNESS_ERROR,
    INTERRUPTED,
    OK,
    PROMOTED,
    RUNNING,
    SPARE,
    STALL_KINDS,
    STALL_MIDSTREAM,
    STALL_TTFT,
    STOP,
    SUBMITTED,
    TOTAL_TIMEOUT,
    TRICKLE,
    WEDGE,
)

STATUS_COLORS = {
    SUBMITTED: "#2a9d8f",
    EARLY_STOP: "#e9c46a",
    API_ERROR: "#e63946",
    HARNESS_ERROR: "#8d5fd3",
    INTERRUPTED: "#9e9e9e",
    RUNNING: "#8ecae6",
}
END_COLORS = {
    STOP: "#9e9e9e",
    WEDGE: "#e63946",
    CRASH: "#6d1a1a",
    API_ERRORS: "#f4a261",
    RUNNING: "#8ecae6",
}
REQUEST_COLORS = {
    OK: "#2a9d8f",
    STALL_TTFT: "#e63946",
    STALL_MIDSTREAM: "#f4a261",
    TRICKLE: "#e9c46a",
    TOTAL_TIMEOUT: "#8d5fd3",
    "other": "#6c757d",
}
CURVE_COLORS = ("#1d3557", "#e76f51", "#2a9d8f", "#8d5fd3", "#6c757d")
MAX_INSTANCE_ROWS = 60  # more instances than this: the timeline packs attempts into lanes
MAX_LABELS = 40


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _text(s: str) -> str:
    """A label as plain text: matplotlib would read ``$...$`` in an instance id as mathtext."""
    return s.replace("$", r"\$")


def _end_color(reason: str) -> str:
    return END_COLORS.get(reason, "#457b9d" if reason.startswith("recycle") else "#6c757d")


def _lanes(spans: Sequence[tuple[float, float]]) -> list[int]:
    """Pack intervals into the fewest rows with no overlap (greedy by start time): with a fixed
    concurrency the rows are the slots the runner's workers filled."""
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])
    free: list[tuple[float, int]] = []  # (end, lane)
    lanes = [0] * len(spans)
    n = 0
    for i in order:
        start, end = spans[i]
        if free and free[0][0] <= start:
            _, lane = heapq.heappop(free)
        else:
            lane, n = n, n + 1
        lanes[i] = lane
        heapq.heappush(free, (end, lane))
    return lanes


def _markers(ax: Any, rd: RunData) -> None:
    """Restarts (dashed) and wedges/crashes (solid) as vertical lines, each kind labelled once."""
    seen: set[str] = set()

    def vline(t: float, label: str, **kw: Any) -> None:
        ax.axvline(t, label=None if label in seen else label, **kw)
        seen.add(label)

    for lv in rd.lives:
        if lv["start_reason"] not in (*FIRST_LIFE, SPARE):
            vline(lv["t_start"], "server restart", color="#1d3557", ls="--", lw=1)
    for ev in rd.events:
        if ev["kind"] == PROMOTED:  # a spare took over: the restart is that moment, not its start
            vline(ev["t"], "server restart", color="#1d3557", ls="--", lw=1)
        if ev["kind"] in (WEDGE, CRASH):
            vline(ev["t"], ev["kind"], color=_end_color(ev["kind"]), ls="-", lw=1.5)


def _stalls(ax: Any, rd: RunData, rows: Sequence[int]) -> None:
    """A cross on its attempt's row where the proxy ended each stalled request."""
    row_of = {a["attempt_id"]: rows[i] for i, a in enumerate(rd.attempts)}
    cut = [(q["t"] + q["duration"], row_of[q["attempt_id"]]) for q in rd.requests
           if q["outcome"] in STALL_KINDS and q["attempt_id"] in row_of]  # fmt: skip
    if cut:
        ax.scatter(
            [t for t, _ in cut], [r for _, r in cut], marker="x", s=28, color="#000000",
            linewidths=1.2, zorder=3, label=f"stall cut by the proxy ({len(cut)})",
        )  # fmt: skip


def timeline(rd: RunData) -> str | None:
    """One row per instance (or per slot, for big runs), each attempt a bar coloured by status."""
    if not rd.attempts:
        return None
    spans = [(a["t_start"], a["t_end"] if a["t_end"] is not None else rd.t_end) for a in rd.attempts]
    by_instance = len(rd.outcomes) <= MAX_INSTANCE_ROWS
    if by_instance:
        pos = {o["instance_id"]: i for i, o in enumerate(rd.outcomes)}
        rows = [pos.get(a["instance_id"], 0) for a in rd.attempts]
        n_rows = max(len(rd.outcomes), max(rows) + 1)  # an instance without an attempt keeps its row
    else:
        rows = _lanes(spans)
        n_rows = max(rows) + 1
    fig = _figure(11, min(16.0, 1.8 + 0.24 * n_rows))
    ax = fig.add_subplot()
    min_w = max(rd.t_end, 1e-3) * 0.003  # a 40 ms attempt on a 10-minute axis still shows
    for status, color in STATUS_COLORS.items():
        idx = [i for i, a in enumerate(rd.attempts) if a["status"] == status]
        if idx:
            ax.barh(
                [rows[i] for i in idx],
                [max(spans[i][1] - spans[i][0], min_w) for i in idx],
                left=[spans[i][0] for i in idx],
                height=0.72,
                color=color,
                edgecolor="white",  # back-to-back retries stay apart
                linewidth=0.6,
                label=f"{status} ({len(idx)})",
            )
    _markers(ax, rd)
    _stalls(ax, rd, rows)
    ax.set_ylim(n_rows - 0.5, -0.5)
    if by_instance and n_rows <= MAX_LABELS:
        ax.set_yticks(range(n_rows), [_text(o["instance_id"]) for o in rd.outcomes], fontsize=7)
    else:
        ax.set_ylabel("instance (suite order)" if by_instance else "slot (attempts packed into lanes)")
    ax.set_xlim(0, rd.t_end * 1.01 + 1e-3)
    ax.set_xlabel("seconds since the run started")
    ax.set_title("attempts over time")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    return _png(fig)


def lives(rd: RunData) -> str | None:
    """Server lives as bars along time (hatched until ready), coloured by how they ended."""
    if not rd.lives:
        return None
    n = len(rd.lives)
    fig = _figure(11, min(10.0, 1.6 + 0.3 * n))
    ax = fig.add_subplot()
    labelled: set[str] = set()
    for i, lv in enumerate(rd.lives):
        reason = lv["end_reason"] or RUNNING
        start = lv["t_start"]
        end = lv["t_end"] if lv["t_end"] is not None else rd.t_end
        ready = lv["t_ready"] if lv["t_ready"] is not None else end
        color = _end_color(reason)
        label = None if reason in labelled else f"ended: {reason}"
        labelled.add(reason)
        ax.barh(i, max(ready - start, 0), left=start, height=0.6, color=color, alpha=0.35, hatch="//")
        ax.barh(i, max(end - ready, 0), left=ready, height=0.6, color=color, label=label)
        if n <= MAX_LABELS:
            age = lv["age_requests"]
            ax.text(
                end, i, f"  {reason}" + (f", {age} req" if age is not None else ""), va="center", fontsize=7
            )
    for ev in rd.events:
        if ev["kind"] == WEDGE:
            row = next((i for i, lv in enumerate(rd.lives) if lv["life_id"] == ev["life_id"]), None)
            if row is not None:
                ax.plot(ev["t"], row, "x", color="black", ms=7)
    ax.set_ylim(n - 0.5, -0.5)
    if n <= MAX_LABELS:
        ax.set_yticks(range(n), [lv["life_id"][-8:] for lv in rd.lives], fontsize=7)
    ax.set_xlim(0, rd.t_end * 1.12 + 1e-3)
    ax.set_xlabel("seconds since the run started (hatched: starting and warming up; x: wedge detected)")
    ax.set_title("server lives")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    return _png(fig)


def _request_group(outcome: str) -> str:
    return outcome if outcome == OK or outcome in STALL_KINDS else "other"


def latency(rd: RunData) -> str | None:
    """TTFT and request durations (log scale), stacked by outcome so stalls stand out."""
    if not rd.requests:
        return None
    import numpy as np

    fig = _figure(11, 3.6)
    axes = fig.subplots(1, 2)
    groups = list(REQUEST_COLORS)
    others = Counter(q["outcome"] for q in rd.requests if _request_group(q["outcome"]) == "other")
    names = {g: g for g in groups} | {"other": ", ".join(f"{k} {v}" for k, v in others.most_common(3))}
    for ax, key, title in (
        (axes[0], "ttft", "time to first token"),
        (axes[1], "duration", "request duration"),
    ):
        vals = {g: [float(q[key]) for q in rd.requests if q[key] is not None and _request_group(q["outcome"]) == g]
                for g in groups}  # fmt: skip
        present = [g for g in groups if vals[g]]
        ax.set_title(title)
        if key == "ttft":
            never = Counter(q["outcome"] for q in rd.requests if q["ttft"] is None)
            if never:
                note = "no first token: " + ", ".join(f"{k} {v}" for k, v in never.most_common(3))
                ax.text(
                    0.99,
                    0.99,
                    note,
                    ha="right",
                    va="top",
                    fontsize=7,
                    color="#b3261e",
                    transform=ax.transAxes,
                )
        if not present:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
            continue
        every = np.clip(np.concatenate([vals[g] for g in present]), 1e-4, None)
        bins = np.geomspace(float(every.min()) / 1.1, float(every.max()) * 1.1, 40)
        ax.hist(
            [np.clip(vals[g], 1e-4, None) for g in present],
            bins=bins,
            stacked=True,
            color=[REQUEST_COLORS[g] for g in present],
            label=[f"{names[g]} ({len(vals[g])})" if g != "other" else names[g] for g in present],
        )
        ax.set_xscale("log")
        ax.set_xlabel("seconds (log scale)")
        ax.set_ylabel("requests")
        ax.legend(fontsize=7, frameon=False, loc="upper left")
    return _png(fig)


def counter(rd: RunData) -> str | None:
    """The watched generated-tokens counter per life: a flat stretch while requests run is a wedge."""
    if not rd.samples or rd.counter is None:
        return None
    fig = _figure(11, 3.6)
    ax = fig.add_subplot()
    per_life: dict[str, tuple[list[float], list[float]]] = {}
    for life_id, t, v in rd.samples:
        ts, vs = per_life.setdefault(life_id, ([], []))
        ts.append(t)
        vs.append(v)
    for i, (life_id, (ts, vs)) in enumerate(per_life.items()):
        label = life_id[-8:] if len(per_life) <= 12 else None
        ax.plot(
            ts, vs, drawstyle="steps-post", lw=1.2, color=CURVE_COLORS[i % len(CURVE_COLORS)], label=label
        )
    for ev in rd.events:
        if ev["kind"] == WEDGE and ev["life_id"] in per_life:
            ts, vs = per_life[ev["life_id"]]
            before = [v for t, v in zip(ts, vs, strict=True) if t <= ev["t"]]
            ax.plot(ev["t"], before[-1] if before else vs[0], "x", color="#e63946", ms=9, mew=2)
    ax.set_xlim(0, rd.t_end * 1.01 + 1e-3)
    ax.set_xlabel("seconds since the run started (x: wedge detected)")
    ax.set_ylabel(_text(rd.counter))
    ax.set_title("the watched token counter, per server life")
    if len(per_life) <= 12:
        ax.legend(fontsize=7, frameon=False, title="life", title_fontsize=7)
    return _png(fig)


def survival(curves: Sequence[tuple[str, Survival]]) -> str | None:
    """Kaplan–Meier curves (one per run) with their 95% bands; + marks censored lives."""
    if not any(sv.lives for _, sv in curves):
        return None
    fig = _figure(8, 4.2)
    ax = fig.add_subplot()
    axis = curves[0][1].axis
    for i, (label, sv) in enumerate(curves):
        if not sv.lives:
            continue
        color = CURVE_COLORS[i % len(CURVE_COLORS)]
        last = max([lv.age for lv in sv.lives] + sv.times)
        xs = [0.0, *sv.times, last]
        ys = [1.0, *sv.survival, sv.survival[-1] if sv.survival else 1.0]
        nan = float("nan")
        lo = [1.0, *(nan if c[0] is None else c[0] for c in sv.ci95)]
        hi = [1.0, *(nan if c[1] is None else c[1] for c in sv.ci95)]
        lo.append(lo[-1])
        hi.append(hi[-1])
        n = len(sv.lives)
        legend = f"{_text(label)}: {n} {'life' if n == 1 else 'lives'}, {sv.n_failed} failed"
        ax.step(xs, ys, where="post", color=color, lw=2, label=legend)
        ax.fill_between(xs, lo, hi, step="post", color=color, alpha=0.18, lw=0)
        cens = [lv.age for lv in sv.lives if not lv.failed]
        ax.plot(cens, [sv.at(a) for a in cens], "+", color=color, ms=10, mew=1.5)
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlim(left=0)
    ax.set_xlabel(f"age of the server life ({axis})")
    ax.set_ylabel("P(still serving)")
    ax.set_title("survival of server lives (Kaplan–Meier, 95% band; + censored)")
    ax.legend(fontsize=8, frameon=False, loc="lower left")
    return _png(fig)
