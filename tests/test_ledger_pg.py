"""The ledger on a real PostgreSQL (tests/pg_server.py starts one per session): the same schema
and views as SQLite, the append-only rule enforced, ``ledger copy`` lossless both ways, analysis
queries portable, and a bad ledger URL said in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ledger_helpers import add_attempt, evaluate, make_run
from pg_server import PgServer
from wedgewatch.analysis.rundata import load_run
from wedgewatch.analysis.summary import summarise
from wedgewatch.base.errors import BadInput, LedgerConflict
from wedgewatch.config import load_config
from wedgewatch.ledger import Ledger, checks
from wedgewatch.ledger.copy import LEDGER_TABLES, copy, rows_of
from wedgewatch.ledger.pg.sql import placeholders
from wedgewatch.runner import entry as runner_main
from wedgewatch.suites import load_bundled

pytestmark = pytest.mark.timeout(180)

IDS = [i["instance_id"] for i in load_bundled()[:4]]
VIEWS = ("instance_outcomes", "instance_next", "attempt_view", "run_budgets", "attempt_budget")


def dump(ledger: Ledger) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table but the ledger's own bookkeeping, in key order."""
    return {t: rows_of(ledger, t, None) for t in ledger.tables() if t not in LEDGER_TABLES}


def views(ledger: Ledger, run_id: str) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for v in VIEWS:
        key = "attempt_id" if v.startswith("attempt") else "run_id" if v == "run_budgets" else "instance_id"
        out[v] = [
            dict(r) for r in ledger.query(f"SELECT * FROM {v} WHERE run_id = ? ORDER BY {key}", (run_id,))
        ]
    return out


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run on the simulator into SQLite: server lives, requests, samples, a stall's
    api_error and its retry, evaluations."""
    tmp = tmp_path_factory.mktemp("simrun")
    line = str(load_bundled()[0]["problem_statement"]).splitlines()[0]
    scenario = tmp / "scenario.toml"
    scenario.write_text(
        f'[policy]\nskill = 0.5\n[[fault]]\nwhen.contains = "{line}"\ntimes = 1\naction = "stall_ttft"\n'
    )
    cfg = tmp / "c.toml"
    cfg.write_text(
        f"""
[server]
profile = "sim"
scenario = "{scenario}"
args = ["--policy", "swe"]
scrape_interval = 0.2
restart_after_api_errors = 0
log_dir = "{tmp / "logs"}"
[server.warmup]
count = 1
[watchdog]
ttft_timeout = 20.0
stall_timeout = 20.0
[agent]
step_limit = 8
[suite]
ids = {json.dumps(IDS)}
[run]
concurrency = 4
ledger = "{tmp / "run.sqlite"}"
workdir = "{tmp / "work"}"
time_scale = 20.0
seed = 2
"""
    )
    ex = runner_main.start(load_config(cfg), run_id="sim")
    assert ex.end_mark == "finished"
    return tmp / "run.sqlite"


def test_placeholders_leave_literals_and_casts_alone() -> None:
    sql = "SELECT '?', \"a?\", x::jsonb FROM t WHERE a = ? AND b LIKE '50%' -- why?\nAND c % ? = 0"
    assert placeholders(sql) == (
        "SELECT '?', \"a?\", x::jsonb FROM t WHERE a = %s AND b LIKE '50%%' -- why?\nAND c %% %s = 0"
    )
    assert placeholders("SELECT 'it''s ?' WHERE a = :a AND b::text = :b", named=True) == (
        "SELECT 'it''s ?' WHERE a = %(a)s AND b::text = %(b)s"
    )


def test_same_columns_on_both_backends(tmp_path: Path, pg_url: str) -> None:
    """A column added to ledger/schema.py without its Alembic migration fails here."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from wedgewatch.ledger.pg.migrations import HEAD
    from wedgewatch.ledger.pg.store import MIGRATIONS

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(cfg).get_current_head() == HEAD
    with Ledger(tmp_path / "l.sqlite") as lite, Ledger(pg_url) as pg:
        assert pg.tables() == lite.tables()
        for t in lite.tables():
            assert pg.columns(t) == lite.columns(t), t
        assert pg.schema_version() == lite.schema_version()
        assert type(pg).__name__ == "PgLedger" and pg.shared and not lite.shared


def test_views_give_the_same_outcomes_on_both_backends(tmp_path: Path, pg_url: str) -> None:
    ids = ["resolved", "unresolved", "empty", "early", "infra3", "infra2", "running", "requeued",
           "await_eval", "eval_errors", "raised", "untouched", "infra4"]  # fmt: skip
    got = []
    for target in (str(tmp_path / "l.sqlite"), pg_url):
        with Ledger(target) as lg:
            make_run(lg, "r", ids, attempts_max=3)
            add_attempt(lg, "r", "resolved", 1, "submitted", patch="diff", resolved=1)
            add_attempt(lg, "r", "unresolved", 1, "submitted", patch="diff", resolved=0)
            add_attempt(lg, "r", "empty", 1, "submitted", patch=" \n\t\r\n")
            add_attempt(lg, "r", "early", 1, "early_stop", "step_limit")
            for no in (1, 2, 3):
                add_attempt(lg, "r", "infra3", no, "api_error", "stall_ttft")
            for no in (1, 2, 3, 4):
                add_attempt(lg, "r", "infra4", no, "api_error", "connection")
            for no in (1, 2):
                add_attempt(lg, "r", "infra2", no, "api_error", "stall_midstream")
            add_attempt(lg, "r", "running", 1, None)
            for no in (1, 2, 3, 4):
                add_attempt(lg, "r", "requeued", no, "api_error", "connection", life_id="life-w")
            add_attempt(lg, "r", "await_eval", 1, "submitted", patch="diff")
            aid = add_attempt(lg, "r", "eval_errors", 1, "submitted", patch="diff")
            for _ in range(3):
                evaluate(lg, aid, None)
            for no in (1, 2, 3):
                add_attempt(lg, "r", "raised", no, "harness_error", "sandbox")
            lg.append("events", {"ts": 1.0, "kind": "wedge", "life_id": "life-w", "detail_json": {}})
            lg.append(
                "run_changes",
                {"run_id": "r", "ts": 2.0, "field": "run.attempts", "value_json": "4", "previous_json": "3"},
            )
            got.append(views(lg, "r"))
    lite, pg = got
    outcome = {r["instance_id"]: r["outcome"] for r in lite["instance_outcomes"]}
    # The cases the views tell apart are all here, so equality below means something.
    assert {outcome[i] for i in ids} == {"resolved", "unresolved", "empty_patch", "early_stop", "infra_failed",
                                         "pending"}  # fmt: skip
    assert outcome["raised"] == "pending" and outcome["infra3"] == "pending"  # attempts raised to 4
    assert outcome["requeued"] == "pending" and outcome["infra4"] == "infra_failed"  # the wedged life's
    assert lite["run_budgets"][0]["attempts_max"] == 4
    for v in VIEWS:
        for a, b in zip(lite[v], pg[v], strict=True):
            a.pop("started_at", None), b.pop("started_at", None)
            a.pop("ended_at", None), b.pop("ended_at", None)
            assert a == b, v


def test_append_only_is_enforced_by_the_database(pg_url: str) -> None:
    with Ledger(pg_url) as lg:
        make_run(lg, "r", ["a"])
        add_attempt(lg, "r", "a", 1, "submitted", patch="x")
        with pytest.raises(LedgerConflict):
            lg.append("attempt_ends", {"attempt_id": "r-a-1", "ended_at": 1.0, "status": "api_error"})
        with pytest.raises(ValueError):
            lg.query("UPDATE attempt_ends SET status = 'x'")
    with psycopg.connect(pg_url) as conn:
        for sql in ("UPDATE attempt_ends SET status = 'x'", "DELETE FROM runs", "TRUNCATE events"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                conn.execute(sql)
            conn.rollback()
        assert conn.execute("SELECT status FROM attempt_ends").fetchall() == [("submitted",)]


@pytest.mark.xdist_group("pg-sim-run")  # one worker makes `sim_run` once
def test_copy_round_trips_a_run_sqlite_pg_sqlite_with_every_row_equal(
    sim_run: Path, pg_server: PgServer, tmp_path: Path
) -> None:
    pg_url = pg_server.new_database()
    back = tmp_path / "back.sqlite"
    with Ledger(sim_run) as a, Ledger(pg_url) as b, Ledger(back) as c:
        assert copy(a, b, "sim").runs == ["sim"]
        copy(b, c)
        rows_a, rows_b, rows_c = dump(a), dump(b), dump(c)
        assert {t: len(r) for t, r in rows_a.items()} == {t: len(r) for t, r in rows_c.items()}
        for t in ("requests", "metric_samples", "events", "server_lives", "attempt_ends", "evaluations"):
            assert rows_a[t], f"the run wrote no {t}: the round trip would prove nothing there"
        assert rows_a == rows_b == rows_c
        # The analysis reads the same from both backends (its queries are portable).
        assert summarise(a, "sim") == summarise(b, "sim")
        ra, rb = load_run(a, "sim"), load_run(b, "sim")
        assert ra.samples == rb.samples and ra.requests == rb.requests and ra.events == rb.events
        assert views(a, "sim") == views(b, "sim")
        assert checks.problems(b) == []
        # New rows after a copy with ids get the next ids (the identity went on past them).
        top = b.query("SELECT MAX(id) FROM events")[0][0]
        assert b.append("events", {"ts": 1.0, "kind": "note"}) == top + 1
    again = cli("ledger", "copy", str(sim_run), pg_url, "--run", "sim")
    assert again.returncode == 2
    assert again.stderr.strip().count("\n") == 0 and "already holds run 'sim'" in again.stderr


@pytest.mark.xdist_group("pg-sim-run")  # one worker makes `sim_run` once
def test_copy_renumbers_serial_ids_another_ledger_took(sim_run: Path, pg_url: str, tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with Ledger(other) as lg:
        make_run(lg, "other", ["a"])
        lg.event("note", run_id="other")
    with Ledger(other) as src, Ledger(pg_url) as dst:
        copy(src, dst)
    with Ledger(sim_run) as src, Ledger(pg_url) as dst:
        done = copy(src, dst, "sim")
        assert "events" in done.renumbered
        kinds = [r[0] for r in src.query("SELECT kind FROM events ORDER BY id")]
        assert [r[0] for r in dst.query("SELECT kind FROM events WHERE id > 1 ORDER BY id")] == kinds
        with pytest.raises(BadInput, match="no run 'nope'"):
            copy(src, dst, "nope")


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://root@127.0.0.1/x", "unknown scheme 'mysql'"),
        ("postgresql://wedgewatch:s3cret@127.0.0.1:1/x", "cannot open"),
    ],
)
def test_a_bad_ledger_url_is_one_line_and_exit_2(url: str, said: str) -> None:
    res = cli("report", "--ledger", url)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().count("\n") == 0 and said in res.stderr, res.stderr
    assert "s3cret" not in res.stderr


def test_a_password_in_the_ledger_url_is_in_no_output_and_no_row(tmp_path: Path, pg_url: str) -> None:
    """The session's PostgreSQL trusts every local login, so any password is accepted: the run
    works, and the password must reach neither what it prints nor its config snapshot."""
    url = pg_url.replace("wedgewatch@", "wedgewatch:s3cret-pw@", 1)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f"""
[server]
profile = "sim"
args = ["--policy", "swe"]
log_dir = "{tmp_path / "logs"}"
[server.warmup]
count = 1
[suite]
ids = {json.dumps(IDS[:1])}
[run]
ledger = "{url}"
workdir = "{tmp_path / "work"}"
time_scale = 20.0
"""
    )
    first = cli("run", str(cfg), "--run-id", "pw")
    assert first.returncode == 0, first.stderr[-2000:]
    # Resumed with the same file, password and all: the snapshot without it is the same config.
    again = cli("run", str(cfg), "--resume", "pw", "--ledger", url)
    assert again.returncode == 0, again.stderr[-2000:]
    printed = first.stdout + first.stderr + again.stdout + again.stderr
    assert "s3cret-pw" not in printed and "wedgewatch:***@" in first.stdout
    with Ledger(pg_url) as lg:
        [snapshot] = [json.loads(r[0]) for r in lg.query("SELECT config_json FROM runs WHERE run_id = 'pw'")]
        everything = json.dumps(dump(lg), default=str)
    assert snapshot["run"]["ledger"] == pg_url  # the URL without its password, usable with PGPASSWORD
    assert "s3cret-pw" not in everything
