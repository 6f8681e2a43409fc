"""Named read queries over the ledger. Everything the runner decides and every number a summary
shows comes from here (or the views behind it), never from state held in memory."""

from __future__ import annotations

from wedgewatch.base.errors import BadInput
from wedgewatch.ledger.store import Ledger, Row


def resolve_run(ledger: Ledger, run_id: str | None) -> Row:
    """The run row for ``run_id``, or the latest run when None. BadInput when there is none."""
    if run_id is None:
        rows = ledger.query("SELECT * FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 1")
        if not rows:
            raise BadInput(f"{ledger.path}: the ledger holds no run")
        return rows[0]
    rows = ledger.query("SELECT * FROM runs WHERE run_id = ?", (run_id,))
    if not rows and harness_run(ledger, run_id) is not None:
        raise BadInput(
            f"{ledger.path}: {run_id!r} is a wrapped run (wedgewatch wrap), not a run of wedgewatch "
            "run: report, lives, export and audit read it"
        )
    if not rows:
        known = [r[0] for r in ledger.query("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 5")]
        hint = f" (latest: {', '.join(known)})" if known else " (the ledger holds no run)"
        raise BadInput(f"{ledger.path}: no run {run_id!r}{hint}")
    return rows[0]


def harness_run(ledger: Ledger, harness_run_id: str) -> Row | None:
    """The harness run ``wedgewatch wrap`` recorded under this id, with its end (``ended_at``,
    ``exit_code``, ``end_reason``: None while it runs, or when its wrap died unseen), or None."""
    rows = ledger.query(
        "SELECT h.*, e.ended_at, e.exit_code, e.end_reason FROM harness_runs h "
        "LEFT JOIN harness_run_ends e ON e.harness_run_id = h.harness_run_id WHERE h.harness_run_id = ?",
        (harness_run_id,),
    )
    return rows[0] if rows else None


def resolve_any(ledger: Ledger, run_id: str | None) -> tuple[bool, Row]:
    """``(wrapped, row)``: the run of ``wedgewatch run`` (``wrapped`` False, its ``runs`` row) or the
    harness run of ``wedgewatch wrap`` (True, ``harness_run``'s row) with this id; the latest of
    either when None. BadInput naming the latest of both when there is none."""
    if run_id is None:
        latest = ledger.query(
            "SELECT 0 AS wrapped, run_id AS id, started_at FROM runs UNION ALL "
            "SELECT 1, harness_run_id, started_at FROM harness_runs ORDER BY started_at DESC, id DESC LIMIT 1"
        )
        if not latest:
            raise BadInput(f"{ledger.path}: the ledger holds no run and no wrapped run")
        run_id = str(latest[0]["id"])
    wrapped = harness_run(ledger, run_id)
    if wrapped is not None:
        return True, wrapped
    rows = ledger.query("SELECT * FROM runs WHERE run_id = ?", (run_id,))
    if rows:
        return False, rows[0]
    known = [
        r[0]
        for r in ledger.query(
            "SELECT run_id AS id, started_at FROM runs UNION ALL "
            "SELECT harness_run_id, started_at FROM harness_runs ORDER BY started_at DESC LIMIT 5"
        )
    ]
    hint = f" (latest: {', '.join(known)})" if known else " (the ledger holds no run and no wrapped run)"
    raise BadInput(f"{ledger.path}: no run {run_id!r}{hint}")


def harness_requests(ledger: Ledger, harness_run_id: str) -> list[Row]:
    """The request rows of a harness run, oldest first, each with ``life_end`` (its life's end
    reason): those on the run's server lives, and those that reached no life (``life_id`` NULL)
    while the run was going. The tag a request carried is its ``attempt_id``."""
    run = harness_run(ledger, harness_run_id)
    if run is None:
        return []
    end = run["ended_at"] if run["ended_at"] is not None else 1e18
    return ledger.query(
        "SELECT r.*, l.end_reason AS life_end FROM requests r "
        "LEFT JOIN server_life_view l ON l.life_id = r.life_id "
        "WHERE l.run_id = ? OR (r.life_id IS NULL AND r.started_at BETWEEN ? AND ?) "
        "ORDER BY r.started_at, r.request_id",
        (harness_run_id, run["started_at"], end),
    )


def run_ids(ledger: Ledger) -> list[str]:
    """Every run in the ledger, oldest first."""
    return [str(r["run_id"]) for r in ledger.query("SELECT run_id FROM runs ORDER BY started_at, run_id")]


def run_exists(ledger: Ledger, run_id: str) -> bool:
    return bool(ledger.query("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)))


def instance_outcomes(ledger: Ledger, run_id: str) -> list[Row]:
    return ledger.query("SELECT * FROM instance_outcomes WHERE run_id = ? ORDER BY position", (run_id,))


def instance_next(ledger: Ledger, run_id: str, instance_id: str) -> Row:
    rows = ledger.query(
        "SELECT * FROM instance_next WHERE run_id = ? AND instance_id = ?", (run_id, instance_id)
    )
    return rows[0]


def budgets(ledger: Ledger, run_id: str) -> Row:
    """The run's attempts_max and max_requeues in force (the latest ``run_changes`` row of each,
    else the run as created)."""
    return ledger.query("SELECT * FROM run_budgets WHERE run_id = ?", (run_id,))[0]


def unfinished(ledger: Ledger, run_id: str) -> list[str]:
    """Instance ids whose outcome is not final yet, in suite order: what a run (or resume) works on."""
    rows = ledger.query(
        "SELECT instance_id FROM instance_next WHERE run_id = ? AND next_action IS NOT NULL "
        "ORDER BY position",
        (run_id,),
    )
    return [r[0] for r in rows]


def in_flight(ledger: Ledger, run_id: str) -> list[Row]:
    """Attempts that started and have no end: what a resume marks interrupted."""
    return ledger.query(
        "SELECT a.* FROM attempts a LEFT JOIN attempt_ends e ON e.attempt_id = a.attempt_id "
        "WHERE a.run_id = ? AND e.attempt_id IS NULL ORDER BY a.started_at",
        (run_id,),
    )


def last_seen(ledger: Ledger, run_id: str, runner_id: str | None = None) -> float | None:
    """The last moment the run's writers were heard from: the runner's last lease beat when it
    beat one, else the latest row of the run (a metric sample of one of its lives, which the
    supervisor writes every scrape, a request's end, an event, an attempt's end). What a resume
    takes as the end of the attempts it finds in flight: the time after is the process's
    downtime, not time the attempt spent."""
    if runner_id is not None:
        beat = ledger.query("SELECT MAX(ts) FROM runner_beats WHERE runner_id = ?", (runner_id,))[0][0]
        if beat is not None:
            return float(beat)
    seen = [
        ledger.query(sql, (run_id,))[0][0]
        for sql in (
            "SELECT MAX(m.ts) FROM metric_samples m JOIN server_lives l ON l.life_id = m.life_id "
            "WHERE l.run_id = ?",
            "SELECT MAX(q.started_at + q.duration) FROM requests q JOIN attempts a "
            "ON a.attempt_id = q.attempt_id WHERE a.run_id = ?",
            "SELECT MAX(ts) FROM events WHERE run_id = ?",
            "SELECT MAX(e.ended_at) FROM attempt_ends e JOIN attempts a ON a.attempt_id = e.attempt_id "
            "WHERE a.run_id = ?",
        )
    ]
    present = [float(v) for v in seen if v is not None]
    return max(present) if present else None


def run_instances(ledger: Ledger, run_id: str) -> list[Row]:
    return ledger.query("SELECT * FROM run_instances WHERE run_id = ? ORDER BY position", (run_id,))


def attempts(ledger: Ledger, run_id: str) -> list[Row]:
    return ledger.query(
        "SELECT * FROM attempt_view WHERE run_id = ? ORDER BY instance_id, attempt_no", (run_id,)
    )


def attempt_requests(ledger: Ledger, attempt_id: str) -> list[Row]:
    return ledger.query(
        "SELECT request_id, outcome, started_at, duration FROM requests WHERE attempt_id = ? "
        "ORDER BY started_at",
        (attempt_id,),
    )


def run_marks(ledger: Ledger, run_id: str) -> list[Row]:
    return ledger.query("SELECT * FROM run_marks WHERE run_id = ? ORDER BY id", (run_id,))


def runners(ledger: Ledger, run_id: str) -> list[Row]:
    """The run's runners, oldest first, each with its last beat and how it ended (None: no end)."""
    return ledger.query(
        "SELECT r.runner_id, r.host, r.pid, r.pid_space, r.pid_start, r.lease_seconds, "
        "(SELECT MAX(b.ts) FROM runner_beats b WHERE b.runner_id = r.runner_id) AS last_beat, "
        "(SELECT e.how FROM runner_ends e WHERE e.runner_id = r.runner_id) AS ended "
        "FROM runners r WHERE r.run_id = ? ORDER BY r.started_at, r.runner_id",
        (run_id,),
    )


def lease_holds(runner: Row, now: float) -> bool:
    """Whether a leased runner's last beat is within its lease at ``now`` (the ledger's clock)."""
    last = runner["last_beat"]
    return last is not None and now - float(last) <= float(runner["lease_seconds"])


def live_runners(ledger: Ledger, run_id: str) -> int:
    """The run's runners with no end whose lease holds by the ledger's clock. Only leased runners
    (a shared ledger) are counted: a lease is the one sign of life a reader on any host can judge;
    runners of a one-writer (SQLite) run beat no lease."""
    now = ledger.now()  # before the beats, as lease.runners_of reads them
    leased = [r for r in runners(ledger, run_id) if r["ended"] is None and r["lease_seconds"] is not None]
    return sum(1 for r in leased if lease_holds(r, now))


def server_lives(ledger: Ledger, run_id: str) -> list[Row]:
    return ledger.query("SELECT * FROM server_life_view WHERE run_id = ? ORDER BY started_at", (run_id,))


def run_requests(ledger: Ledger, run_id: str) -> list[Row]:
    """The request rows of the run's attempts, oldest first."""
    return ledger.query(
        "SELECT q.* FROM requests q JOIN attempts a ON a.attempt_id = q.attempt_id "
        "WHERE a.run_id = ? ORDER BY q.started_at, q.request_id",
        (run_id,),
    )


def request_outcomes(ledger: Ledger, run_id: str) -> dict[str, int]:
    """Requests of the run's attempts, counted by outcome."""
    rows = ledger.query(
        "SELECT q.outcome, COUNT(*) FROM requests q JOIN attempts a ON a.attempt_id = q.attempt_id "
        "WHERE a.run_id = ? GROUP BY q.outcome",
        (run_id,),
    )
    return {r[0]: int(r[1]) for r in rows}


def events_by_kind(ledger: Ledger, run_id: str) -> dict[str, int]:
    """Events of the run: rows tagged with the run, or with one of its server lives."""
    rows = ledger.query(
        "SELECT kind, COUNT(*) FROM events WHERE run_id = ? "
        "OR (run_id IS NULL AND life_id IN (SELECT life_id FROM server_lives WHERE run_id = ?)) "
        "GROUP BY kind",
        (run_id, run_id),
    )
    return {r[0]: int(r[1]) for r in rows}
