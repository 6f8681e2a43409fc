"""``wedgewatch ledger copy SRC DST [--run RUN]``: runs moved between ledgers of any backend
(SQLite to PostgreSQL and back), losslessly: every row of every table, its ids included, in one
transaction on DST. A run DST already holds is never overwritten.

A run's rows are the run's own (run_id), its attempts' (attempt_id), and its server lives'
(life_id), as ``events_by_kind`` reads them. ``meta`` and ``schema_migrations`` describe a ledger,
not a run: DST keeps its own. Without ``--run``, every row of SRC is copied (runs, harness runs,
and rows of no run, such as a bare ``wedgewatch proxy``'s)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wedgewatch.base.errors import BadInput, LedgerConflict
from wedgewatch.ledger.store import Ledger

LEDGER_TABLES = ("meta", "schema_migrations")
# Rows read per query from SRC (a run's requests and samples can be many).
BATCH = 5000

_ATTEMPTS = "(SELECT attempt_id FROM attempts WHERE run_id = ?)"
_LIVES = "(SELECT life_id FROM server_lives WHERE run_id = ?)"
_RUNNERS = "(SELECT runner_id FROM runners WHERE run_id = ?)"
# Each table's rows of one run: (WHERE clause, how many times the run id is bound).
RUN_ROWS: dict[str, tuple[str, int]] = {
    "runs": ("run_id = ?", 1),
    "run_marks": ("run_id = ?", 1),
    "run_changes": ("run_id = ?", 1),
    "run_instances": ("run_id = ?", 1),
    "harness_runs": ("harness_run_id = ?", 1),
    "harness_run_ends": ("harness_run_id = ?", 1),
    "server_lives": ("run_id = ?", 1),
    "server_life_ready": (f"life_id IN {_LIVES}", 1),
    "server_life_ends": (f"life_id IN {_LIVES}", 1),
    "attempts": ("run_id = ?", 1),
    "attempt_ends": (f"attempt_id IN {_ATTEMPTS}", 1),
    "evaluations": (f"attempt_id IN {_ATTEMPTS}", 1),
    "requests": (f"attempt_id IN {_ATTEMPTS} OR life_id IN {_LIVES}", 2),
    "request_starts": (f"attempt_id IN {_ATTEMPTS} OR life_id IN {_LIVES}", 2),
    "events": (f"run_id = ? OR attempt_id IN {_ATTEMPTS} OR life_id IN {_LIVES}", 3),
    "metric_samples": (f"life_id IN {_LIVES}", 1),
    "runners": ("run_id = ?", 1),
    "runner_beats": (f"runner_id IN {_RUNNERS}", 1),
    "runner_ends": (f"runner_id IN {_RUNNERS}", 1),
    "runner_lives": (f"runner_id IN {_RUNNERS}", 1),
    "evaluation_starts": ("run_id = ?", 1),
}


@dataclass
class Copied:
    runs: list[str]
    rows: dict[str, int] = field(default_factory=dict)
    renumbered: list[str] = field(default_factory=list)  # tables whose ids DST had taken already


def _run_ids(ledger: Ledger) -> list[str]:
    rows = ledger.query("SELECT run_id FROM runs UNION SELECT harness_run_id FROM harness_runs")
    return sorted(str(r[0]) for r in rows)


def _order(ledger: Ledger, table: str) -> str:
    cols = ledger.columns(table)
    for key in ("id", "request_id", "attempt_id", "life_id", "harness_run_id", "runner_id", "run_id"):
        if key in cols:
            return key + {"run_instances": ", instance_id", "evaluation_starts": ", eval_no"}.get(table, "")
    return ", ".join(cols)


def rows_of(ledger: Ledger, table: str, run_id: str | None) -> list[dict[str, Any]]:
    """Every row of ``table`` (of ``run_id`` only, when given), in key order."""
    where, binds = (
        ("", ()) if run_id is None else (f" WHERE {RUN_ROWS[table][0]}", (run_id,) * RUN_ROWS[table][1])
    )
    order = _order(ledger, table)
    out: list[dict[str, Any]] = []
    while True:
        chunk = ledger.query(
            f"SELECT * FROM {table}{where} ORDER BY {order} LIMIT {BATCH} OFFSET {len(out)}", binds
        )
        out.extend(dict(r) for r in chunk)
        if len(chunk) < BATCH:
            return out


def copy(src: Ledger, dst: Ledger, run_id: str | None = None) -> Copied:
    """Copy one run (or all of SRC) into DST; BadInput if DST holds any of those runs already."""
    have = _run_ids(src)
    if run_id is not None and run_id not in have:
        raise BadInput(f"--run: {src.path} holds no run {run_id!r}")
    runs = [run_id] if run_id is not None else have
    clash = sorted(set(runs) & set(_run_ids(dst)))
    if clash:
        raise BadInput(f"DST {dst.path} already holds run {clash[0]!r}; a copy never overwrites a run")
    tables = [t for t in src.tables() if t not in LEDGER_TABLES]
    missing = {t: [c for c in src.columns(t) if c not in dst.columns(t)] for t in tables}
    if any(missing.values()):
        t = next(t for t, cols in missing.items() if cols)
        raise BadInput(f"DST {dst.path}: table {t} has no column(s) {missing[t]} (upgrade its wedgewatch)")
    batches: list[tuple[str, list[dict[str, Any]]]] = []
    renumbered: list[str] = []
    for table in tables:
        if run_id is not None and table not in RUN_ROWS:
            continue  # a table newer than this copy knows: only a whole-ledger copy takes it
        rows = rows_of(src, table, run_id)
        if rows and "id" in rows[0]:
            # A serial id is only an order: where DST has used these numbers already (runs from
            # two ledgers), the rows get DST's next ones, in the same order.
            top = dst.query(f"SELECT MAX(id) FROM {table}")[0][0]
            if top is not None and top >= min(r["id"] for r in rows):
                rows = [{k: v for k, v in r.items() if k != "id"} for r in rows]
                renumbered.append(table)
        batches.append((table, rows))
    try:
        dst.append_all(batches)
    except LedgerConflict as exc:
        raise BadInput(f"DST already holds a row SRC has ({exc}); nothing was copied") from None
    return Copied(runs, {t: len(r) for t, r in batches}, renumbered)
