"""The view's pages and the fragments its live connection sends, rendered from the shared
templates (``analysis/templates/panels.html.j2``) with the data of ``analysis/panels``. Every
function here reads the ledger synchronously: the web handlers call them in a worker thread, so a
slow query never holds the view's event loop."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from wedgewatch.analysis.panels import chains, flight, header, lanes
from wedgewatch.analysis.panels.axis import duration
from wedgewatch.analysis.panels.flight import seconds
from wedgewatch.analysis.panels.render import domid, environment
from wedgewatch.analysis.panels.scope import RUN, Scope, scopes
from wedgewatch.base.vocab import ATTEMPT_STATUSES, OUTCOMES
from wedgewatch.ledger.store import Ledger
from wedgewatch.view.progress import Snapshot
from wedgewatch.view.tracker import Tracker


def _panels() -> Any:
    return environment().get_template("panels.html.j2").module


def header_ctx(ledger: Ledger, scope: Scope, now: float) -> dict[str, Any]:
    return header.header(ledger, scope, now)


def lanes_ctx(ledger: Ledger, scope: Scope, now: float, live: bool) -> dict[str, Any]:
    return lanes.lanes(ledger, scope, now, live)


def flight_ctx(
    ledger: Ledger, scope: Scope, snap: Snapshot, now: float, found: flight.Pending | None = None
) -> dict[str, Any]:
    found = found if found is not None else flight.pending(ledger, scope, now)
    wd = snap.watchdog or flight.watchdog_of(ledger, scope)
    rows = flight.rows(ledger, found, snap.rows, wd, now, snap.rates)
    live = sum(1 for r in rows if not r["ended"])
    return {"rows": rows, "live": live, "ended": len(rows) - live, "source": snap.source()}


def instances_ctx(ledger: Ledger, scope: Scope, f: chains.Filters, base: str | None) -> dict[str, Any]:
    rows = chains.instances(ledger, scope.id, f)
    total = ledger.query("SELECT COUNT(*) FROM run_instances WHERE run_id = ?", (scope.id,))[0][0]
    form = None
    if base is not None:
        statuses = list(dict.fromkeys([*ATTEMPT_STATUSES, *OUTCOMES]))
        form = {"base": base, "f": f, "statuses": statuses, "servers": chains.servers(ledger, scope.id)}
    return {"rows": rows, "total": total, "form": form}


def scope_page(
    ledger: Ledger, scope: Scope, f: chains.Filters, snap: Snapshot, live: str, stream: str, title: str
) -> str:
    now = time.time()
    h = header_ctx(ledger, scope, now)
    ctx: dict[str, Any] = {
        "title": title,
        "scope": scope,
        "scopes": scopes(ledger),
        "live": live,
        "stream": stream,
        "h": h,
        "L": lanes_ctx(ledger, scope, now, bool(h["live"])),
        "F": flight_ctx(ledger, scope, snap, now),
        "C": chains.causes(ledger, scope.id) if scope.kind == RUN else None,
        "I": instances_ctx(ledger, scope, f, scope.path) if scope.kind == RUN else None,
    }
    return str(environment().get_template("view.html.j2").render(**ctx))


def index_body(ledger: Ledger, oob: bool = False) -> str:
    """Every scope of the ledger, newest first: its header and its lanes."""
    return index_parts(ledger, oob)[0]


def index_parts(ledger: Ledger, oob: bool = False) -> tuple[str, bool]:
    """``index_body``, and whether any of its scopes is still live."""
    now = time.time()
    parts: list[dict[str, Any]] = []
    for scope in reversed(scopes(ledger)):
        h = header_ctx(ledger, scope, now)
        L = lanes_ctx(ledger, scope, now, bool(h["live"]))
        parts.append({"scope": scope, "h": h, "L": L, "sid": domid("scope", scope.path)})
    html = str(environment().get_template("index.html.j2").module.body(parts, oob))  # type: ignore[attr-defined]
    return html, any(bool(p["h"]["live"]) for p in parts)


def index_page(ledger: Ledger, live: str, stream: str, title: str) -> str:
    return str(
        environment()
        .get_template("view.html.j2")
        .render(
            title=title, scope=None, scopes=scopes(ledger), live=live, stream=stream, body=index_body(ledger)
        )
    )


# --- the fragments of a live update --------------------------------------------------------------


def header_html(ledger: Ledger, scope: Scope) -> str:
    return str(_panels().header(header_ctx(ledger, scope, time.time()), oob=True))


def lanes_html(ledger: Ledger, scope: Scope, live: bool) -> str:
    return str(_panels().lanes(lanes_ctx(ledger, scope, time.time(), live), oob=True))


def flight_html(
    ledger: Ledger,
    scope: Scope,
    snap: Snapshot,
    tracker: Tracker | None = None,
    rows: Mapping[str, Any] | None = None,
) -> tuple[str, int]:
    """The table, and how many rows it has (none: the feed stops sending it). With a live page's
    ``tracker``, fed the rows new since its last look, rather than the ledger asked again."""
    now = time.time()
    found = tracker.found(rows or {}, now) if tracker is not None else None
    F = flight_ctx(ledger, scope, snap, now, found)
    return str(_panels().flight(F, oob=True)), len(F["rows"])


def causes_html(ledger: Ledger, scope: Scope) -> str:
    return str(_panels().causes(chains.causes(ledger, scope.id), scope.path, oob=True))


def instances_html(ledger: Ledger, scope: Scope, f: chains.Filters) -> str:
    return str(_panels().instances(instances_ctx(ledger, scope, f, scope.path), oob=True))


def instance_rows_html(ledger: Ledger, scope: Scope, ids: Iterable[str]) -> str:
    rows = chains.instances(ledger, scope.id, only=ids)
    # Table rows travel inside a template element, where the HTML parser keeps them as rows.
    return "<template>" + "".join(str(_panels().instance_row(i, oob=True)) for i in rows) + "</template>"


# --- the pages of one attempt and one server life --------------------------------------------------


def attempt_page(ledger: Ledger, attempt_id: str, title: str) -> str | None:
    found = ledger.query("SELECT * FROM attempt_view WHERE attempt_id = ?", (attempt_id,))
    if not found:
        return None
    a = dict(found[0])
    requests = ledger.query(
        "SELECT request_id, life_id, started_at, duration, ttft, tokens_out, outcome, http_status, detail_json "
        "FROM requests WHERE attempt_id = ? ORDER BY started_at, request_id",
        (attempt_id,),
    )
    t0 = float(a["started_at"])
    reqs = [
        {**dict(r), "at": duration(float(r["started_at"]) - t0), "took": seconds(r["duration"])}
        for r in requests
    ]
    return str(
        environment()
        .get_template("detail.html.j2")
        .render(title=title, what="attempt", a=a, requests=reqs, life=None, events=[], attempts=[])
    )


def life_page(ledger: Ledger, life_id: str, title: str) -> str | None:
    found = ledger.query("SELECT * FROM server_life_view WHERE life_id = ?", (life_id,))
    if not found:
        return None
    life = dict(found[0])
    events = ledger.query(
        "SELECT ts, kind, detail_json FROM events WHERE life_id = ? ORDER BY ts, id", (life_id,)
    )
    t0 = float(life["started_at"])
    evs = [
        {"at": duration(float(e["ts"]) - t0), "kind": e["kind"], "detail": e["detail_json"] or ""}
        for e in events
    ]
    attempts = ledger.query(
        "SELECT attempt_id, instance_id, attempt_no, status, reason FROM attempt_view WHERE life_id = ? "
        "OR start_life_id = ? ORDER BY started_at",
        (life_id, life_id),
    )
    outcomes = ledger.query(
        "SELECT outcome, COUNT(*) AS n FROM requests WHERE life_id = ? GROUP BY outcome ORDER BY n DESC",
        (life_id,),
    )
    return str(
        environment()
        .get_template("detail.html.j2")
        .render(
            title=title,
            what="life",
            a=None,
            requests=[dict(r) for r in outcomes],
            life=life,
            events=evs,
            attempts=[dict(r) for r in attempts],
        )
    )
