"""The ledger: schema version and migration, append-only, and the views that derive outcomes and
what to retry (real SQLite files)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from ledger_helpers import add_attempt, evaluate, make_run, next_actions, outcomes
from wedgewatch.base.errors import BadInput, LedgerConflict
from wedgewatch.base.vocab import BUDGETED, MODEL_SIDE, RETRIED
from wedgewatch.ledger import SCHEMA_VERSION, Ledger

ROOT = Path(__file__).resolve().parent.parent


def test_new_ledger_is_wal_with_schema_version(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as lg:
        assert lg.schema_version() == SCHEMA_VERSION
        assert lg.query("PRAGMA journal_mode")[0][0] == "wal"
        assert lg.query("SELECT value FROM meta WHERE key = 'schema_version'")[0][0] == str(SCHEMA_VERSION)
    with Ledger(tmp_path / "l.sqlite") as lg:  # reopening adds nothing
        assert len(lg.query("SELECT * FROM schema_migrations")) == 1


V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
CREATE TABLE runs (run_id TEXT PRIMARY KEY, started_at REAL NOT NULL, config_json TEXT NOT NULL,
  config_hash TEXT NOT NULL, tool_version TEXT NOT NULL, suite TEXT, attempts_max INTEGER NOT NULL, seed INTEGER);
CREATE TABLE run_instances (run_id TEXT NOT NULL, instance_id TEXT NOT NULL, position INTEGER NOT NULL,
  PRIMARY KEY (run_id, instance_id));
CREATE TABLE attempts (attempt_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, instance_id TEXT NOT NULL,
  attempt_no INTEGER NOT NULL, started_at REAL NOT NULL, life_id TEXT, agent TEXT, sandbox_path TEXT);
CREATE TABLE attempt_ends (attempt_id TEXT PRIMARY KEY, ended_at REAL NOT NULL, status TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '', patch TEXT, steps INTEGER, tokens INTEGER, life_id TEXT, detail_json TEXT);
INSERT INTO runs VALUES ('r1', 1.0, '{}', 'h', '0.0', 's', 3, 0);
INSERT INTO run_instances VALUES ('r1', 'i1', 0);
INSERT INTO attempts VALUES ('r1-0-1', 'r1', 'i1', 1, 1.0, 'life-a', 'bash', '/tmp/x');
INSERT INTO attempt_ends VALUES ('r1-0-1', 2.0, 'early_stop', 'step_limit', NULL, 50, 9, 'life-a', NULL);
"""


def test_version_1_file_is_migrated_additively(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(V1)
    conn.close()
    with Ledger(path) as lg:
        assert lg.schema_version() == SCHEMA_VERSION
        cols = {r[1] for r in lg.query("PRAGMA table_info(attempts)")}
        assert {"age_seconds", "age_requests", "age_tokens"} <= cols
        assert "instance_json" in {r[1] for r in lg.query("PRAGMA table_info(run_instances)")}
        # the old facts are all there, and the views read them
        assert outcomes(lg, "r1") == {"i1": "early_stop"}
        row = lg.query("SELECT * FROM attempt_view")[0]
        assert (row["status"], row["reason"], row["steps"]) == ("early_stop", "step_limit", 50)


def test_newer_schema_is_refused_with_the_file_named(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    with Ledger(path) as lg:
        lg.append(
            "schema_migrations", {"version": SCHEMA_VERSION + 5, "applied_at": 0.0, "tool_version": "9"}
        )
    with pytest.raises(BadInput, match=r"future\.sqlite.*newer"):
        Ledger(path)


def test_an_attempt_ends_once(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["a"])
        aid = add_attempt(lg, "r", "a", 1, "submitted", patch="x")
        with pytest.raises(LedgerConflict):
            lg.append("attempt_ends", {"attempt_id": aid, "ended_at": 1.0, "status": "api_error"})
        assert lg.query("SELECT COUNT(*) FROM attempt_ends")[0][0] == 1


def test_query_is_read_only(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as lg, pytest.raises(ValueError):
        lg.query("DELETE FROM runs")


# Statements that would rewrite or remove a fact. INSERT OR IGNORE is allowed (it never changes a row).
_FORBIDDEN = re.compile(
    r"\bUPDATE\s+[A-Za-z_]+\s+SET\b|\bDELETE\s+FROM\b|\bINSERT\s+OR\s+REPLACE\b|\bREPLACE\s+INTO\b"
    r"|\bDO\s+UPDATE\b|\bDROP\s+TABLE\b",
    re.IGNORECASE,
)


def test_no_update_or_delete_anywhere_in_the_code() -> None:
    offenders = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if _FORBIDDEN.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []
    assert _FORBIDDEN.search('conn.execute("update attempts set status = ?")')  # the check can fail


def test_instance_outcomes_cover_every_case(tmp_path: Path) -> None:
    ids = [
        "resolved",
        "unresolved",
        "empty",
        "early",
        "infra3",
        "infra2",
        "running",
        "interrupted5",
        "await_eval",
        "eval_errors",
        "retried_then_resolved",
        "untouched",
        "harness_mix",
    ]
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ids, attempts_max=3)
        add_attempt(lg, "r", "resolved", 1, "submitted", patch="diff", resolved=1)
        add_attempt(lg, "r", "unresolved", 1, "submitted", patch="diff", resolved=0)
        add_attempt(lg, "r", "empty", 1, "submitted", patch=" \n\t\n")
        add_attempt(lg, "r", "early", 1, "early_stop", "step_limit")
        for no in (1, 2, 3):
            add_attempt(lg, "r", "infra3", no, "api_error", "stall_ttft")
        for no in (1, 2):
            add_attempt(lg, "r", "infra2", no, "api_error", "stall_midstream")
        add_attempt(lg, "r", "running", 1, None)
        for no in range(1, 6):
            add_attempt(lg, "r", "interrupted5", no, "interrupted", "found_on_resume")
        add_attempt(lg, "r", "await_eval", 1, "submitted", patch="diff")
        aid = add_attempt(lg, "r", "eval_errors", 1, "submitted", patch="diff")
        for _ in range(3):
            evaluate(lg, aid, None)
        add_attempt(lg, "r", "retried_then_resolved", 1, "api_error", "server_restarted")
        add_attempt(lg, "r", "retried_then_resolved", 2, "interrupted")
        add_attempt(lg, "r", "retried_then_resolved", 3, "submitted", patch="diff", resolved=1)
        add_attempt(lg, "r", "harness_mix", 1, "harness_error", "sandbox")
        add_attempt(lg, "r", "harness_mix", 2, "api_error", "connection")
        add_attempt(lg, "r", "harness_mix", 3, "harness_error", "agent_crash")

        assert outcomes(lg, "r") == {
            "resolved": "resolved",
            "unresolved": "unresolved",
            "empty": "empty_patch",
            "early": "early_stop",
            "infra3": "infra_failed",
            "infra2": "pending",
            "running": "pending",
            "interrupted5": "pending",  # interrupted attempts do not use up the budget
            "await_eval": "pending",
            "eval_errors": "infra_failed",
            "retried_then_resolved": "resolved",
            "untouched": "pending",
            "harness_mix": "infra_failed",
        }
        assert next_actions(lg, "r") == {
            "resolved": (None, 2),
            "unresolved": (None, 2),
            "empty": (None, 2),
            "early": (None, 2),
            "infra3": (None, 4),
            "infra2": ("attempt", 3),
            "running": ("running", 2),
            "interrupted5": ("attempt", 6),
            "await_eval": ("evaluate", 2),
            "eval_errors": (None, 2),
            "retried_then_resolved": (None, 4),
            "untouched": ("attempt", 1),
            "harness_mix": (None, 4),
        }


def test_latest_verdict_wins_and_an_error_does_not_erase_one(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["a"])
        aid = add_attempt(lg, "r", "a", 1, "submitted", patch="diff", resolved=0)
        evaluate(lg, aid, 1, source="swebench_report")
        assert outcomes(lg, "r") == {"a": "resolved"}
        evaluate(lg, aid, None)  # a later evaluation that could not run keeps the verdict
        assert outcomes(lg, "r") == {"a": "resolved"}


@pytest.mark.parametrize("status", sorted(RETRIED | MODEL_SIDE))
def test_view_agrees_with_the_retry_policy(tmp_path: Path, status: str) -> None:
    """The SQL view and vocab's retry rule name the same statuses: retried ones get another attempt,
    budgeted ones run out after attempts_max, model-side ones are final."""
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["a"], attempts_max=2)
        add_attempt(lg, "r", "a", 1, status, patch="")
        action = next_actions(lg, "r")["a"][0]
        assert (action == "attempt") == (status in RETRIED)
        assert (action is None) == (status in MODEL_SIDE)
        add_attempt(lg, "r", "a", 2, status, patch="")
        final = outcomes(lg, "r")["a"]
        if status in BUDGETED:
            assert final == "infra_failed"
        elif status in RETRIED:
            assert final == "pending"


def test_outcome_of_one_instance_reads_only_its_rows(tmp_path: Path) -> None:
    """The per-instance lookup the runner makes after every attempt uses the index, not a scan."""
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ["a"])
        plan = " ".join(
            r[3]
            for r in lg.query(
                "EXPLAIN QUERY PLAN SELECT * FROM instance_next WHERE run_id = ? AND instance_id = ?",
                ("r", "a"),
            )
        )
        assert "SCAN a" not in plan and "SCAN attempts" not in plan, plan


def test_version_4_file_gets_the_member_column_on_server_lives(tmp_path: Path) -> None:
    path = tmp_path / "v4.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL,"
        " tool_version TEXT NOT NULL);"
        "INSERT INTO schema_migrations VALUES (4, 0.0, '0');"
        "CREATE TABLE server_lives (life_id TEXT PRIMARY KEY, run_id TEXT, profile TEXT NOT NULL,"
        " argv_json TEXT, flags_json TEXT, base_url TEXT NOT NULL, pid INTEGER,"
        " start_reason TEXT NOT NULL, started_at REAL NOT NULL, log_path TEXT);"
        "INSERT INTO server_lives VALUES ('old', NULL, 'sim', NULL, NULL, 'http://x', 1, 'initial', 1.0, NULL);"
    )
    conn.close()
    with Ledger(path) as lg:
        assert lg.schema_version() == SCHEMA_VERSION
        assert "member" in {r[1] for r in lg.query("PRAGMA table_info(server_lives)")}
        lg.append(
            "server_lives",
            {
                "life_id": "new",
                "profile": "sim",
                "base_url": "http://y",
                "start_reason": "initial",
                "started_at": 2.0,
                "member": "s1",
            },
        )
        got = {r["life_id"]: r["member"] for r in lg.query("SELECT life_id, member FROM server_life_view")}
        assert got == {"old": None, "new": "s1"}
