"""Tight clusters of durations, and the client timeout that explains them.

A request stuck at 0 tokens per second ends when the client gives up: after T seconds per try,
k tries, plus a little backoff. Every hung instance then ends at about k x T + b seconds, while
instances that really worked take as long as their work did. So the signature is a group of
durations far tighter than the run's natural spread.

The test, in log-duration (relative) terms: for each window of sorted durations (at most 1% or
2 s wide), how likely is it that ``m - 1`` other durations fall within the window's span of its
first one, if durations came from the run's own smoothed density (a Gaussian kernel in log
duration, bandwidth by Silverman's rule but never under 0.1, i.e. natural durations are assumed
to vary by at least ~10%)? A Poisson tail, multiplied by the number of durations (the windows
looked at), below ``ALPHA`` makes a cluster. Nothing here is tied to 1,802 s or to 600 s; known
timeouts only name the clusters found.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any

from wedgewatch.analysis.stats import median, poisson_sf

OPENAI_SDK_TIMEOUT = 600.0  # the OpenAI Python SDK's default read timeout (and litellm's)
COMMON_TIMEOUTS = (
    30.0,
    60.0,
    90.0,
    120.0,
    180.0,
    240.0,
    300.0,
    360.0,
    480.0,
    600.0,
    900.0,
    1200.0,
    1800.0,
    3600.0,
)
MAX_TRIES = 5
ALPHA = 1e-3  # after multiplying by the number of windows: about 1 natural run in 1,000 flagged
MIN_BANDWIDTH = 0.1  # natural agent durations vary by at least ~10% (log units)
MAX_BANDWIDTH = 0.5
MAX_REL_SPAN = 0.01  # a cluster is at most 1% of its duration wide...
MIN_SPAN = 2.0  # ...or 2 s, whichever is larger
RESOLUTION = 1.0  # seconds: no duration is trusted to better than this


@dataclass
class Cluster:
    lo: float
    hi: float
    center: float
    count: int
    p_value: float
    members: list[int] = field(default_factory=list)  # indices into the durations given
    explanations: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "center": round(self.center, 3),
            "lo": round(self.lo, 3),
            "hi": round(self.hi, 3),
            "spread": round(self.hi - self.lo, 3),
            "count": self.count,
            "p_value": self.p_value,
            "explanations": self.explanations,
        }


def slack(timeout: float, tries: int) -> float:
    """How far past ``tries x timeout`` a hung request may end: backoff, connect, scheduling."""
    return tries * max(2.0, 0.01 * timeout)


def explain(center: float, hints: list[float]) -> list[dict[str, Any]]:
    """``k x T + b`` readings of a duration: hinted timeouts first, then common ones by fewest
    tries; a lone deadline of about ``center`` when nothing fits."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[float, int]] = set()
    for source, timeouts in (("hint", hints), ("common", COMMON_TIMEOUTS)):
        found = []
        for t in timeouts:
            for k in range(1, MAX_TRIES + 1):
                b = center - k * t
                if 0 <= b <= slack(t, k) and (t, k) not in seen:
                    seen.add((t, k))
                    found.append({"timeout": t, "tries": k, "backoff": round(b, 3), "source": source})
        out += sorted(found, key=lambda e: (e["tries"], e["timeout"]))
    if not out:
        out.append({"timeout": round(center, 1), "tries": 1, "backoff": 0.0, "source": "unknown"})
    return out


def hint_match(duration: float, hints: list[float]) -> dict[str, Any] | None:
    """The first hinted ``k x T + b`` a single duration fits, or None."""
    for t in hints:
        for k in range(1, MAX_TRIES + 1):
            b = duration - k * t
            if 0 <= b <= slack(t, k):
                return {"timeout": t, "tries": k, "backoff": round(b, 3)}
    return None


def _bandwidth(logs: list[float]) -> float:
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / max(n - 1, 1))
    q = sorted(logs)
    iqr = q[(3 * n) // 4] - q[n // 4]
    spread = min(sd, iqr / 1.34) if iqr > 0 else sd
    return min(MAX_BANDWIDTH, max(MIN_BANDWIDTH, 0.9 * spread * math.pow(n, -0.2)))


def _densities(logs: list[float], h: float) -> list[float]:
    """Durations per unit of log duration at each of ``logs`` (a Gaussian kernel estimate),
    in blocks so that ten thousand durations need neither minutes nor a gigabyte."""
    import numpy as np

    x = np.asarray(logs, dtype=float)
    out = np.empty_like(x)
    for start in range(0, len(x), 1024):
        z = (x[start : start + 1024, None] - x[None, :]) / h
        out[start : start + 1024] = np.exp(-0.5 * z * z).sum(axis=1)
    return [float(v) for v in out / (h * math.sqrt(2 * math.pi))]


def find_clusters(durations: list[float], alpha: float = ALPHA) -> list[Cluster]:
    """Clusters among ``durations`` (seconds), most significant first; [] for a natural spread."""
    pts = sorted((d, i) for i, d in enumerate(durations) if d > 0 and math.isfinite(d))
    n = len(pts)
    if n < 3:
        return []
    logs = [math.log(d) for d, _ in pts]
    h = _bandwidth(logs)
    dens = _densities(logs, h)  # members included: conservative
    free = list(range(n))  # positions in pts not yet in a cluster
    found: list[Cluster] = []
    while len(free) >= 3:
        xs = [pts[p][0] for p in free]
        best: tuple[float, int, int] | None = None
        for i, x in enumerate(xs):
            j_max = bisect.bisect_right(xs, x + max(MIN_SPAN, MAX_REL_SPAN * x)) - 1
            for j in range(i + 2, j_max + 1):
                span = max(xs[j] - x, RESOLUTION)
                lam = dens[free[i]] * math.log1p(span / x)
                p = min(1.0, n * poisson_sf(j - i, lam))
                if best is None or p < best[0]:
                    best = (p, i, j)
        if best is None or best[0] >= alpha:
            break
        p, i, j = best
        members = free[i : j + 1]
        vals = xs[i : j + 1]
        found.append(
            Cluster(
                lo=vals[0],
                hi=vals[-1],
                center=median(vals),
                count=len(vals),
                p_value=p,
                members=sorted(pts[q][1] for q in members),
            )
        )
        taken = set(members)
        free = [q for q in free if q not in taken]
    return found
