"""The HTML report: one self-contained page (inline CSS, figures as data URIs, no scripts, nothing
fetched) for one run or several side by side. Each run's header, server lanes, causes and attempts
are the live view's panels (``analysis/panels``, ``templates/panels.html.j2``), frozen. Figures come from ``plots``, numbers from
``analysis.summary.summarise`` and ``survival``; the page is a jinja2 template shipped in the
package with autoescaping on, since instance ids and reasons come from users' files.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wedgewatch.analysis import plots
from wedgewatch.analysis.panels import chains
from wedgewatch.analysis.panels.header import header
from wedgewatch.analysis.panels.lanes import lanes
from wedgewatch.analysis.panels.render import environment
from wedgewatch.analysis.panels.scope import RUN, Scope
from wedgewatch.analysis.rundata import RunData, load_run
from wedgewatch.analysis.survival import Survival, ci_text, survival
from wedgewatch.analysis.text import rate_text
from wedgewatch.base.files import write_private
from wedgewatch.base.vocab import IN_FLIGHT, INFRA_FAILED, MODEL_OUTCOMES, PENDING, RECOVERED, RUNNING
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger

log = logging.getLogger(__name__)


def _secs(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f} s" if abs(x) < 10 else f"{x:,.1f} s"


def _counts(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items() if v) or "none"


def summary_rows(summaries: Sequence[dict[str, Any]]) -> list[tuple[str, list[str], str]]:
    """(label, one cell per run, note) rows of the side-by-side summary table."""

    def row(label: str, fn: Any, note: str = "") -> tuple[str, list[str], str]:
        return (label, [str(fn(s)) for s in summaries], note)

    rows = [
        row("state", lambda s: s["state"]),
        row("instances", lambda s: s["instances"], "the suite: every score's denominator"),
    ]
    rows += [row(k, lambda s, k=k: s["outcomes"][k], "model outcome") for k in MODEL_OUTCOMES]
    rows += [
        row(INFRA_FAILED, lambda s: s["outcomes"][INFRA_FAILED], "every attempt failed on our or the server's side"),
        row(PENDING, lambda s: s["outcomes"][PENDING], "not final yet"),
        row(RECOVERED, lambda s: s.get(RECOVERED, 0), "of the model outcomes: the agent's retry of a failed request succeeded"),
        row("resolved / all instances", lambda s: rate_text(s["resolved_rate_all"]), "95% Wilson interval"),
        row("resolved / model outcomes", lambda s: rate_text(s["resolved_rate_model"]), "infra_failed and pending left out"),
        row("attempts", lambda s: f"{s['attempts']['total']}: {_counts(s['attempts']['by_status'])}"),
        row("infrastructure endings", lambda s: _counts(s["attempts"]["infra_reasons"])),
        row("instances retried", lambda s: s["attempts"]["instances_retried"]),
        row("stalls", lambda s: f"{sum(s['stalls'].values())}: {_counts(s['stalls'])}", "requests the proxy ended"),
        row("server lives", lambda s: s["server"]["lives"]),
        row("restarts", lambda s: f"{s['server']['restarts']}: {_counts(s['server']['restart_reasons'])}"),
        row("wedges / crashes", lambda s: f"{s['server']['wedges']} / {s['server']['crashes']}"),
        row("time lost to infrastructure",
            lambda s: f"{_secs(s['infra_time']['attempt_seconds'])} in failed attempts, "
            f"{_secs(s['infra_time']['restart_seconds'])} restarting"),
        row("wall clock", lambda s: _secs(s["wall_seconds"])),
    ]  # fmt: skip
    return rows


def _life_rows(rd: RunData) -> list[dict[str, Any]]:
    return [
        {
            "life": lv["life_id"],
            "start_reason": lv["start_reason"],
            "ready": _secs(lv["ready_seconds"]),
            "end_reason": lv["end_reason"] or RUNNING,
            "age_requests": "-" if lv["age_requests"] is None else lv["age_requests"],
            "age_tokens": "-" if lv["age_tokens"] is None else lv["age_tokens"],
            "alive": _secs(lv["seconds_alive"]),
        }
        for lv in rd.lives
    ]


def _panels(ledger: Ledger, rd: RunData) -> dict[str, Any]:
    """What the live view shows of the run (``wedgewatch view``), frozen: the same data, the same
    templates, without the live connection and the links to the view's other pages."""
    scope = Scope(RUN, rd.run_id, rd.t0)
    now = time.time()
    h = header(ledger, scope, now)
    return {
        "h": h,
        "L": lanes(ledger, scope, now, bool(h["live"])),
        "C": chains.causes(ledger, rd.run_id),
        "I": {"rows": chains.instances(ledger, rd.run_id), "total": rd.summary["instances"], "form": None},
    }


def _run_context(ledger: Ledger, rd: RunData, label: str) -> dict[str, Any]:
    s = rd.summary
    return {
        "label": label,
        "run_id": rd.run_id,
        "s": s,
        "started": dt.datetime.fromtimestamp(rd.t0, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "in_flight": s["state"] in IN_FLIGHT,
        "score": rate_text(s["resolved_rate_all"]),
        "score_model": rate_text(s["resolved_rate_model"]),
        "plots": {
            "timeline": plots.timeline(rd),
            "lives": plots.lives(rd),
            "latency": plots.latency(rd),
            "counter": plots.counter(rd),
        },
        "counter_name": rd.counter,
        "n_requests": len(rd.requests),
        "lives": _life_rows(rd),
        **_panels(ledger, rd),
    }


def _survival_context(curves: list[tuple[str, Survival]], data: list[RunData]) -> dict[str, Any]:
    tables = []
    for (label, sv), rd in zip(curves, data, strict=True):
        rows = [
            {"age": f"{t:g}", "at_risk": n, "failed": d, "s": f"{s:.3f}",
             "ci": ci_text(*ci)}
            for t, n, d, s, ci in zip(sv.times, sv.at_risk, sv.failures, sv.survival, sv.ci95, strict=True)
        ]  # fmt: skip
        d = sv.as_dict()
        blind = bool(sv.lives) and not rd.requests and sv.axis == "requests"
        note = (
            "No request of this run went through the proxy, so its lives' ages count only the "
            "supervisor's own requests (readiness, warm-up, canaries)."
            if blind
            else ""
        )
        tables.append({"label": label, "rows": rows, "note": note, **d})
    return {"plot": plots.survival(curves), "tables": tables, "axis": curves[0][1].axis if curves else ""}


def render_html(
    ledger: Ledger,
    run_ids: Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
    title: str | None = None,
) -> str:
    """The page for ``run_ids`` (default: the latest run), side by side in the given order;
    ``labels`` name the columns (default: the run ids)."""
    t = time.monotonic()
    wanted: Sequence[str | None] = run_ids or [None]
    ids = [str(queries.resolve_run(ledger, r)["run_id"]) for r in wanted]
    names = list(labels) if labels else ids
    if len(names) != len(ids):
        raise ValueError("labels must name every run")
    data = [load_run(ledger, rid) for rid in ids]
    curves = [(name, survival(ledger, [rid])) for name, rid in zip(names, ids, strict=True)]
    page = (
        environment()
        .get_template("report.html.j2")
        .render(
            title=title or "wedgewatch report: " + ", ".join(ids),
            generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            ledger=ledger.path,
            runs=[_run_context(ledger, rd, name) for rd, name in zip(data, names, strict=True)],
            summary_rows=summary_rows([rd.summary for rd in data]),
            names=names,
            survival=_survival_context(curves, data),
            status_colors=plots.STATUS_COLORS,
        )
    )
    log.info("report for %s rendered in %.2f s", ", ".join(ids), time.monotonic() - t)
    return page


def write_html(
    ledger: Ledger,
    path: str | Path,
    run_ids: Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
    title: str | None = None,
) -> Path:
    """Render the page and write it to ``path`` (parent directories created)."""
    out = Path(path)
    write_private(out, render_html(ledger, run_ids, labels, title))  # the user's only
    return out
