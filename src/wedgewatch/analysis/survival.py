"""Survival of server lives: how likely a life is to still be serving at a given age, from the
ledger's server lives, with a Kaplan–Meier estimate and a 95% band.

A life *fails* when it wedged, crashed, or was restarted after consecutive API errors (the
supervisor's ``api_errors`` ending: two attempts in a row failed on the server, which is how most
wedges end when the proxy's stalls reach the restart rule before the metrics window does; left
out, those wedges would be censored and the curve would say the server is healthier than it is),
unless the life's last canary before its end answered: then the server was generating and the
stalls were the requests' own (a prompt that always stalls), so the life is censored.
The failure age is the one the supervisor recorded in the ``wedge`` event (so a wedge that
``restart_on_wedge = false`` left running still counts, at the age it wedged), else the age at the
life's end. Every other ending is *censored* at the age the life reached: stopped at the run's
end, recycled, lost or orphaned after wedgewatch itself died, or still running. Lives that never
became ready (start_failed, warmup_failed, port_busy) served nothing and are left out, counted
apart. ``failures=`` changes which endings count (``("wedge", "crash")`` gives the cause-specific
curve with API-error restarts censored).

The estimate is the product-limit estimator with Greenwood's variance, in numpy: statsmodels'
``SurvfuncRight`` computes the same (the tests hold it to it) but importing it costs about 3 s
(pandas, scipy.stats), more than the rest of a report. The band is pointwise, on the log(-log)
scale, so it stays inside [0, 1].
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from wedgewatch.analysis.text import table
from wedgewatch.base.vocab import API_ERRORS, CANARY, LIFE_FAILURES, RUNNING, WEDGE, sql_list
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger

FAILURES = LIFE_FAILURES
AXES = {"requests": "age_requests", "tokens": "age_tokens", "seconds": "age_seconds"}


@dataclass
class LifeAge:
    """One server life as survival sees it."""

    run_id: str
    life_id: str
    age: float
    failed: bool
    reason: str  # the end reason, or "running"


@dataclass
class Survival:
    """A Kaplan–Meier curve: ``survival[i]`` is the estimated probability that a life is still
    serving just after age ``times[i]`` (the ages at which lives failed)."""

    axis: str
    lives: list[LifeAge]
    failure_reasons: tuple[str, ...] = FAILURES
    times: list[float] = field(default_factory=list)
    at_risk: list[int] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)
    survival: list[float] = field(default_factory=list)
    se: list[float | None] = field(default_factory=list)
    ci95: list[tuple[float | None, float | None]] = field(default_factory=list)
    not_ready: dict[str, int] = field(default_factory=dict)

    @property
    def n_failed(self) -> int:
        return sum(1 for lv in self.lives if lv.failed)

    def median(self) -> float | None:
        """The smallest age at which the estimate is at or below 1/2 (None if it never gets there)."""
        return next((t for t, s in zip(self.times, self.survival, strict=True) if s <= 0.5), None)

    def at(self, age: float) -> float:
        """The estimate at ``age`` (a right-continuous step function, 1 before the first failure)."""
        s = 1.0
        for t, v in zip(self.times, self.survival, strict=True):
            if t > age:
                break
            s = v
        return s

    def as_dict(self) -> dict[str, Any]:
        return {
            "axis": self.axis,
            "lives": len(self.lives),
            "failed": self.n_failed,
            "failure_reasons": list(self.failure_reasons),
            "censored": len(self.lives) - self.n_failed,
            "not_ready": self.not_ready,
            "median_age": self.median(),
            "ending_reasons": dict(Counter(lv.reason for lv in self.lives)),
            "curve": [
                {"age": t, "at_risk": n, "failed": d, "survival": s, "se": e, "ci95": list(ci)}
                for t, n, d, s, e, ci in zip(
                    self.times, self.at_risk, self.failures, self.survival, self.se, self.ci95, strict=True
                )
            ],
        }


def loglog_band(s: float, se: float, confidence: float = 0.95) -> tuple[float | None, float | None]:
    """Pointwise interval for a survival estimate ``s`` with standard error ``se`` on the
    log(-log) scale (Kalbfleisch–Prentice): s ** exp(±z·se / (s·|log s|)). Undefined at s = 0
    (None, None); (1, 1) at s = 1 (nothing has failed yet)."""
    if s <= 0.0:
        return None, None
    if s >= 1.0 or se <= 0.0:
        return s, s
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    sigma = se / (s * abs(math.log(s)))
    return s ** math.exp(z * sigma), s ** math.exp(-z * sigma)


def kaplan_meier(ages: Sequence[float], failed: Sequence[bool]) -> dict[str, list[Any]]:
    """times, at_risk, failures, survival, se and ci95 of the product-limit estimate, at each age
    where a life failed (ties: a life censored at that age is still at risk there). Greenwood's
    variance; se is None once the estimate reaches 0, where it is undefined."""
    import numpy as np

    t = np.asarray(ages, dtype=float)
    e = np.asarray(failed, dtype=bool)
    times, d = np.unique(t[e], return_counts=True)
    n = len(t) - np.searchsorted(np.sort(t), times, side="left")
    s = np.cumprod(1.0 - d / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        var = s**2 * np.cumsum(d / (n * (n - d)).astype(float))
    out: dict[str, list[Any]] = {k: [] for k in ("times", "at_risk", "failures", "survival", "se", "ci95")}
    for ti, ni, di, si, vi in zip(times, n, d, s, var, strict=True):
        se = math.sqrt(vi) if math.isfinite(vi) else None
        out["times"].append(float(ti))
        out["at_risk"].append(int(ni))
        out["failures"].append(int(di))
        out["survival"].append(float(si))
        out["se"].append(se)
        out["ci95"].append(loglog_band(float(si), se) if se is not None else (None, None))
    return out


def _detail(text: str | None) -> dict[str, Any]:
    try:
        d = json.loads(text) if text else {}
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def life_ages(
    ledger: Ledger, run_ids: Sequence[str], axis: str = "requests", failures: Sequence[str] = FAILURES
) -> tuple[list[LifeAge], dict[str, int]]:
    """Each ready server life of the runs with its age on ``axis`` and whether it failed; and the
    lives that never became ready, counted by end reason."""
    col = AXES[axis]
    lives: list[LifeAge] = []
    not_ready: Counter[str] = Counter()
    for rid in run_ids:
        queries.resolve_any(ledger, rid)  # a run, or a wrapped run: its lives carry its id alike
        first_wedge: dict[str, dict[str, Any]] = {}
        canary_ok: dict[str, bool] = {}  # the last canary that ran, per life
        for ev in ledger.query(
            f"SELECT kind, life_id, detail_json FROM events WHERE kind IN ({sql_list((WEDGE, CANARY))}) AND life_id IN "
            "(SELECT life_id FROM server_lives WHERE run_id = ?) ORDER BY id",
            (rid,),
        ):
            d = _detail(ev["detail_json"])
            if ev["kind"] == WEDGE:
                first_wedge.setdefault(ev["life_id"], d)
            elif "ok" in d:  # a skipped canary says nothing
                canary_ok[ev["life_id"]] = d["ok"] is True
        for lv in queries.server_lives(ledger, rid):
            reason = lv["end_reason"] or RUNNING
            if lv["ready_at"] is None:
                not_ready[reason] += 1
                continue
            wedge = first_wedge.get(lv["life_id"])
            if wedge is not None and wedge.get(col) is not None:
                age, failed = float(wedge[col]), WEDGE in failures
                reason = WEDGE if reason == WEDGE else f"{WEDGE}, then {reason}"
            elif lv["end_reason"] is not None:
                age, failed = float(lv[col] or 0), reason in failures
                if reason == API_ERRORS and canary_ok.get(lv["life_id"]):
                    failed, reason = False, f"{API_ERRORS} (canary ok)"
            else:
                age, failed = _running_age(ledger, lv, axis), False
            lives.append(LifeAge(rid, lv["life_id"], age, failed, reason))
    return lives, dict(not_ready)


def _running_age(ledger: Ledger, lv: Any, axis: str) -> float:
    """A life with no end yet (a run in flight, or one killed without a resume): the age its last
    request found it at, plus that request (a lower bound on its age)."""
    row = ledger.query(
        "SELECT MAX(age_requests) AS r, MAX(age_tokens + tokens_out) AS t, "
        "MAX(started_at + duration) AS last FROM requests WHERE life_id = ?",
        (lv["life_id"],),
    )[0]
    if axis == "requests":
        return float(row["r"] + 1) if row["r"] is not None else 0.0
    if axis == "tokens":
        return float(row["t"] or 0)
    return float(row["last"] - lv["started_at"]) if row["last"] is not None else 0.0


def survival(
    ledger: Ledger, run_ids: Sequence[str], axis: str = "requests", failures: Sequence[str] = FAILURES
) -> Survival:
    """The Kaplan–Meier curve of the runs' server lives by age in ``axis`` (requests, tokens or
    seconds), pooled over the runs."""
    if axis not in AXES:
        raise ValueError(f"axis must be one of {', '.join(AXES)}, not {axis!r}")
    lives, not_ready = life_ages(ledger, run_ids, axis, failures)
    km = kaplan_meier([lv.age for lv in lives], [lv.failed for lv in lives])
    return Survival(axis=axis, lives=lives, failure_reasons=tuple(failures), not_ready=not_ready, **km)


def _p(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.3f}"


def ci_text(lo: float | None, hi: float | None) -> str:
    """The band at one age; undefined once the estimate reaches 0."""
    return "n/a at 0" if lo is None or hi is None else f"{_p(lo)}–{_p(hi)}"


def render_text(sv: Survival) -> str:
    """The curve as a text table, with what it rests on."""
    n = len(sv.lives)
    if n == 0:
        return (
            f"survival of server lives: no server life became ready (never ready: {sv.not_ready or 'none'})"
        )
    reasons = ", ".join(f"{k} {v}" for k, v in Counter(lv.reason for lv in sv.lives).most_common())
    lines = [
        f"survival of server lives by age in {sv.axis}: {n} lives, {sv.n_failed} failed "
        f"({'/'.join(sv.failure_reasons)}), "
        f"{n - sv.n_failed} censored" + (f"; endings: {reasons}" if reasons else ""),
    ]
    if sv.not_ready:
        lines.append(
            "never ready (left out): " + ", ".join(f"{k} {v}" for k, v in sorted(sv.not_ready.items()))
        )
    if not sv.times:
        lines.append("no life failed: the estimate is 1 at every age observed")
        return "\n".join(lines)
    rows = [
        (f"{t:g}", n_, d, _p(s), ci_text(lo, hi))
        for t, n_, d, s, (lo, hi) in zip(sv.times, sv.at_risk, sv.failures, sv.survival, sv.ci95, strict=True)
    ]
    lines += table([f"age ({sv.axis})", "at risk", "failed", "survival", "95% CI (log-log)"], rows)
    med = sv.median()
    lines.append(f"median age at failure: {med:g} {sv.axis}" if med is not None else "median not reached")
    return "\n".join(lines)
