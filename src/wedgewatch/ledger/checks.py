"""What every ledger must satisfy, whoever wrote it (``run``, ``serve``, ``wrap``, ``proxy``): the
invariants ``wedgewatch ledger check`` runs, and ``run``, ``wrap`` and ``demo`` run at their end.

Each invariant has a name and says, for each row that breaks it, what is wrong. A fact still open
(a request, a server life, a run or a harness run without its end) is broken only when the process
that wrote it is gone: a check beside a live ``serve`` must not call its live server a fault. The
next process to open the ledger closes what a dead one left (``stack/recovery.py``); a check that
still finds it open says so.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from wedgewatch.base.processes import Identity
from wedgewatch.base.vocab import MODEL_SIDE, RUN_ENDED, SPARE, sql_list
from wedgewatch.ledger.schema import SCHEMA_VERSION
from wedgewatch.ledger.store import Ledger, Row

# Keys that would mean a prompt's or a reply's text reached a row.
TEXT_KEYS = ("messages", "content", "prompt", "completion")


def _alive(row: Row, prefix: str = "") -> bool:
    """Whether the process a row names still runs here (never judged for another pid space)."""
    pid = row[f"{prefix}pid"]
    if pid is None:
        return False
    who = Identity(int(pid), row[f"{prefix}pid_space"] or "", row[f"{prefix}pid_start"])
    return not who.here() or who.alive()


def _schema(ledger: Ledger) -> Iterator[str]:
    if (ok := ledger.integrity()) != "ok":
        yield f"integrity_check: {ok}"
    if ledger.schema_version() != SCHEMA_VERSION:
        yield f"schema version {ledger.schema_version()}, not {SCHEMA_VERSION}"


def _starts_have_ends(ledger: Ledger) -> Iterator[str]:
    q = ledger.query
    for life in q(
        "SELECT l.* FROM server_lives l WHERE l.life_id NOT IN (SELECT life_id FROM server_life_ends)"
    ):
        if not _alive(life, "owner_"):
            yield f"server life {life['life_id']} has no end"
    for run in q(
        "SELECT h.* FROM harness_runs h WHERE h.harness_run_id NOT IN "
        "(SELECT harness_run_id FROM harness_run_ends)"
    ):
        if not _alive(run):
            yield f"harness run {run['harness_run_id']} has no end"
    for start in q(
        "SELECT s.* FROM request_starts s WHERE s.request_id NOT IN (SELECT request_id FROM requests)"
    ):
        if not _alive(start):
            yield f"request {start['request_id']} started and has no end (its process {start['pid']} is gone)"
    for (run,) in q("SELECT run_id FROM runs"):
        marks = [r[0] for r in q("SELECT kind FROM run_marks WHERE run_id = ? ORDER BY id", (run,))]
        if marks and marks[-1] in RUN_ENDED:
            continue
        working = q(
            "SELECT * FROM runners WHERE run_id = ? AND runner_id NOT IN (SELECT runner_id FROM runner_ends)",
            (run,),
        )
        if not any(_alive(r) for r in working):
            yield f"run {run} ends without a terminal mark (marks: {marks})"


def _ends_have_starts(ledger: Ledger) -> Iterator[str]:
    pairs = [
        ("attempt_ends", "attempt_id", "attempts"),
        ("server_life_ready", "life_id", "server_lives"),
        ("server_life_ends", "life_id", "server_lives"),
        ("harness_run_ends", "harness_run_id", "harness_runs"),
        ("runner_ends", "runner_id", "runners"),
    ]
    for end, key, start in pairs:
        for (value,) in ledger.query(
            f"SELECT {key} FROM {end} WHERE {key} NOT IN (SELECT {key} FROM {start})"
        ):
            yield f"{end} row {value} has no {start} row"
    for attempt, n in ledger.query(
        "SELECT attempt_id, eval_no FROM evaluations e WHERE eval_no IS NOT NULL AND NOT EXISTS "
        "(SELECT 1 FROM evaluation_starts s WHERE s.attempt_id = e.attempt_id AND s.eval_no = e.eval_no)"
    ):
        yield f"evaluation {n} of attempt {attempt} has no start"
    # Requests have had start rows since schema 7: an end written since then has its start.
    since = ledger.query("SELECT MIN(applied_at) FROM schema_migrations WHERE version >= 7")[0][0]
    if since is not None:
        for (rid,) in ledger.query(
            "SELECT request_id FROM requests WHERE started_at >= ? AND request_id NOT IN "
            "(SELECT request_id FROM request_starts)",
            (since,),
        ):
            yield f"request {rid} ended with no start row"


def _rows_point_at_rows(ledger: Ledger) -> Iterator[str]:
    q = ledger.query
    for table in ("requests", "request_starts", "attempts", "attempt_ends", "events"):
        for (life,) in q(
            f"SELECT DISTINCT life_id FROM {table} WHERE life_id IS NOT NULL "
            "AND life_id NOT IN (SELECT life_id FROM server_lives)"
        ):
            yield f"{table} name server life {life}, which has no row"
    for (attempt,) in q(
        "SELECT DISTINCT attempt_id FROM evaluations WHERE attempt_id NOT IN (SELECT attempt_id FROM attempts)"
    ):
        yield f"evaluations name attempt {attempt}, which has no row"
    # A run's requests carry its attempts' ids (a wrapped harness's, tags of its own choosing).
    for (attempt,) in q(
        "SELECT DISTINCT r.attempt_id FROM requests r JOIN server_lives l ON l.life_id = r.life_id "
        "WHERE l.run_id IN (SELECT run_id FROM runs) AND r.attempt_id IS NOT NULL "
        "AND r.attempt_id NOT IN (SELECT attempt_id FROM attempts)"
    ):
        yield f"requests name attempt {attempt}, which has no row"
    for (run,) in q(
        "SELECT DISTINCT l.run_id FROM server_lives l WHERE l.run_id IS NOT NULL AND l.run_id NOT IN "
        "(SELECT run_id FROM runs UNION SELECT harness_run_id FROM harness_runs)"
    ):
        yield f"server lives name run {run}, which has no row"


def _one_final_outcome(ledger: Ledger) -> Iterator[str]:
    for run, instance, n in ledger.query(
        f"SELECT a.run_id, a.instance_id, COUNT(*) FROM attempts a JOIN attempt_ends e "
        f"ON e.attempt_id = a.attempt_id WHERE e.status IN ({sql_list(MODEL_SIDE)}) "
        "GROUP BY a.run_id, a.instance_id HAVING COUNT(*) > 1"
    ):
        yield f"instance {instance} of run {run} has {n} final (model-side) attempts, not one"


def _lives_do_not_overlap(ledger: Ledger) -> Iterator[str]:
    """One supervisor runs one life of a member at a time: the next starts after the last ended,
    unless the next is a spare (``server.standby``: started beside the serving life by design).
    Lives of one member started by different processes (several runners on one run) may overlap."""
    rows = ledger.query(
        "SELECT l.life_id, l.run_id, l.member, l.owner_pid, l.owner_pid_start, l.started_at, e.ended_at, "
        "l.start_reason "
        "FROM server_lives l LEFT JOIN server_life_ends e ON e.life_id = l.life_id "
        "ORDER BY l.run_id, l.member, l.owner_pid, l.owner_pid_start, l.started_at"
    )

    def owner(r: Row) -> tuple[object, ...]:
        return (r["run_id"], r["member"], r["owner_pid"], r["owner_pid_start"])

    for key, group in itertools.groupby(rows, key=owner):
        if key[2] is None:
            continue  # written before schema 7: whose supervisor started it is not recorded
        for a, b in itertools.pairwise(list(group)):
            if b["start_reason"] != SPARE and (a["ended_at"] is None or b["started_at"] < a["ended_at"]):
                yield f"server lives {a['life_id']} and {b['life_id']} of one supervisor overlap"


def _no_text(ledger: Ledger) -> Iterator[str]:
    for rid, detail in ledger.query("SELECT request_id, detail_json FROM requests"):
        keys = set(json.loads(detail or "{}"))
        if keys & set(TEXT_KEYS):
            yield f"request {rid} stores text under {sorted(keys & set(TEXT_KEYS))}"


INVARIANTS: dict[str, Callable[[Ledger], Iterator[str]]] = {
    "schema": _schema,
    "starts have ends": _starts_have_ends,
    "ends have starts": _ends_have_starts,
    "rows point at rows": _rows_point_at_rows,
    "one final outcome per instance": _one_final_outcome,
    "lives of one member do not overlap": _lives_do_not_overlap,
    "no text in request rows": _no_text,
}
"""Each invariant by name: a generator of what breaks it."""


@dataclass
class Report:
    """What ``check`` found: each invariant's broken rows, and how many rows it read."""

    broken: dict[str, list[str]] = field(default_factory=dict)
    rows: int = 0

    @property
    def ok(self) -> bool:
        return not any(self.broken.values())

    def line(self) -> str:
        """One line for the end of a command's output."""
        if self.ok:
            return f"ledger check: ok ({len(INVARIANTS)} invariants, {self.rows} rows)"
        names = [f"{name} ({len(found)})" for name, found in self.broken.items() if found]
        return f"ledger check: BROKEN: {', '.join(names)} (wedgewatch ledger check names each row)"


def check(ledger: Ledger) -> Report:
    """Every invariant over ``ledger``."""
    report = Report({name: list(fn(ledger)) for name, fn in INVARIANTS.items()})
    report.rows = sum(int(ledger.query(f"SELECT COUNT(*) FROM {t}")[0][0]) for t in ledger.tables())
    return report


def problems(ledger: Ledger) -> list[str]:
    """Each broken rule as one line, in the invariants' order; empty when the ledger is sound."""
    return [line for found in check(ledger).broken.values() for line in found]
