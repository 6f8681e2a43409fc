"""Exports, import-report and the summary, on a ledger written by hand (real SQLite, real CLI)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import STATSMODELS
from ledger_helpers import add_attempt, dump, evaluate, make_run, outcomes
from wedgewatch.analysis import export
from wedgewatch.analysis.import_report import import_report
from wedgewatch.analysis.stats import wilson
from wedgewatch.analysis.summary import render_text, summarise
from wedgewatch.config import Config
from wedgewatch.ledger import Ledger

IDS = ["res", "unres", "empty", "early", "infra", "pend", "retried"]


def build(path: Path) -> None:
    cfg = Config.model_validate({"server": {"model": "org/the-model"}, "run": {"model_name": "my-model"}})
    with Ledger(path) as lg:
        make_run(lg, "r1", IDS, attempts_max=2, cfg=cfg)
        add_attempt(lg, "r1", "res", 1, "submitted", patch="diff --git a/x b/x\n", resolved=1)
        add_attempt(lg, "r1", "unres", 1, "submitted", patch="diff --git a/y b/y\n", resolved=0)
        add_attempt(lg, "r1", "empty", 1, "submitted", patch="")
        add_attempt(lg, "r1", "early", 1, "early_stop", "step_limit", patch="")
        add_attempt(lg, "r1", "infra", 1, "api_error", "stall_ttft", duration=5.0)
        add_attempt(lg, "r1", "infra", 2, "api_error", "connection", duration=7.0)
        add_attempt(lg, "r1", "pend", 1, "harness_error", "sandbox", duration=0.5)
        add_attempt(lg, "r1", "retried", 1, "api_error", "stall_midstream", duration=3.0)
        add_attempt(lg, "r1", "retried", 2, "submitted", patch="diff --git a/z b/z\n", resolved=1)
        lg.append(
            "requests",
            {
                "request_id": "q1",
                "attempt_id": "r1-infra-1",
                "path": "/v1/chat/completions",
                "client_stream": 0,
                "started_at": 1.0,
                "duration": 5.0,
                "outcome": "stall_ttft",
            },
        )


def test_results_export_has_every_instance_and_attempt(tmp_path: Path) -> None:
    build(tmp_path / "l.sqlite")
    with Ledger(tmp_path / "l.sqlite") as lg:
        recs = {r["instance_id"]: r for r in export.results(lg, "r1")}
    assert list(recs) == IDS  # the whole suite, in order: the denominator
    for rec in recs.values():
        assert {"instance_id", "outcome", "resolved", "api_error", "early_stop", "attempts"} <= set(rec)
        for a in rec["attempts"]:
            assert {
                "status",
                "reason",
                "start",
                "end",
                "duration",
                "server_life",
                "server_age_at_start",
            } <= set(a)
    assert recs["infra"]["outcome"] == "infra_failed" and recs["infra"]["api_error"] is True
    assert [a["reason"] for a in recs["infra"]["attempts"]] == ["stall_ttft", "connection"]
    assert recs["retried"]["outcome"] == "resolved" and recs["retried"]["api_error"] is True
    assert recs["early"]["early_stop"] is True and recs["early"]["resolved"] is False
    assert recs["pend"]["outcome"] == "pending" and recs["pend"]["has_model_outcome"] is False
    # No model outcome, no verdict: null, so an average of the column is the model's score.
    assert recs["pend"]["resolved"] is None and recs["infra"]["resolved"] is None
    assert recs["unres"]["resolved"] is False and recs["res"]["resolved"] is True
    assert recs["res"]["attempts"][0]["server_age_at_start"] == {"seconds": 1.5, "requests": 3, "tokens": 100}
    assert recs["res"]["attempts"][0]["duration"] == pytest.approx(1.0)


def test_predictions_load_with_swebench_and_leave_out_infra(tmp_path: Path) -> None:
    from swebench.harness.utils import get_predictions_from_file

    build(tmp_path / "l.sqlite")
    out = tmp_path / "preds.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "export", "r1", "--format", "swebench", "--out", str(out),
         "--ledger", str(tmp_path / "l.sqlite")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    preds = get_predictions_from_file(str(out), "princeton-nlp/SWE-bench_Lite", "test")
    by_id = {p["instance_id"]: p for p in preds}
    # infra_failed and pending instances are left out, not written as empty patches
    assert set(by_id) == {"res", "unres", "empty", "early", "retried"}
    for p in preds:
        assert set(p) == {"instance_id", "model_name_or_path", "model_patch"}
        assert p["model_name_or_path"] == "my-model"
    assert by_id["retried"]["model_patch"] == "diff --git a/z b/z\n"
    assert by_id["empty"]["model_patch"] == ""


def test_csv_export(tmp_path: Path) -> None:
    build(tmp_path / "l.sqlite")
    with Ledger(tmp_path / "l.sqlite") as lg:
        rows = list(csv.DictReader(io.StringIO(export.render(lg, "r1", "csv"))))
    assert [r["instance_id"] for r in rows] == IDS
    infra = rows[IDS.index("infra")]
    assert infra["outcome"] == "infra_failed" and infra["api_error"] == "1"
    assert (infra["resolved"], infra["has_model_outcome"]) == ("", "0")
    assert [rows[IDS.index(i)]["resolved"] for i in ("res", "unres")] == ["1", "0"]
    assert infra["statuses"] == "api_error:stall_ttft api_error:connection"
    assert float(infra["infra_seconds"]) == pytest.approx(12.0)


def test_summary_keeps_infra_failed_and_pending_beside_the_score(tmp_path: Path) -> None:
    build(tmp_path / "l.sqlite")
    with Ledger(tmp_path / "l.sqlite") as lg:
        s = summarise(lg, "r1")
    assert s["outcomes"] == {
        "resolved": 2,
        "unresolved": 1,
        "empty_patch": 1,
        "early_stop": 1,
        "infra_failed": 1,
        "pending": 1,
    }
    assert (s["resolved_rate_all"]["k"], s["resolved_rate_all"]["n"]) == (2, 7)
    # over instances with a model outcome: infra_failed and pending are not failures of the model
    assert (s["resolved_rate_model"]["k"], s["resolved_rate_model"]["n"]) == (2, 5)
    assert s["attempts"]["by_status"]["api_error"] == 3
    assert s["attempts"]["infra_reasons"]["api_error:stall_ttft"] == 1
    assert s["stalls"]["stall_ttft"] == 1
    assert s["infra_time"]["attempt_seconds"] == pytest.approx(5 + 7 + 0.5 + 3)


@STATSMODELS
def test_wilson_matches_statsmodels() -> None:
    from statsmodels.stats.proportion import proportion_confint

    for k, n in [(0, 5), (3, 10), (10, 10), (14, 20), (1, 2000)]:
        lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
        assert wilson(k, n) == pytest.approx((lo, hi), abs=1e-9)


def test_report_cli_text_and_json(tmp_path: Path) -> None:
    build(tmp_path / "l.sqlite")
    base = [sys.executable, "-m", "wedgewatch", "report", "--ledger", str(tmp_path / "l.sqlite")]
    proc = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["run_id"] == "r1"  # the latest run by default
    proc = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert "infra_failed" in proc.stdout and "resolved / model outcomes" in proc.stdout
    proc = subprocess.run([*base, "nope"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no run 'nope'" in proc.stderr


def test_import_report_adds_verdicts_without_rewriting(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    build(path)
    with Ledger(path) as lg:
        aid = add_attempt(lg, "r1", "pend", 2, "submitted", patch="diff --git a/p b/p\n")
        before = dump(lg)
    report = {
        "resolved_ids": ["unres", "pend"],
        "unresolved_ids": ["res"],
        "error_ids": ["retried"],
        "empty_patch_ids": ["empty"],
        "infra_failure_ids": [],
        "schema_version": 2,
    }
    report_path = tmp_path / "report.json"
    report_path.write_text(json.dumps(report))
    proc = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "import-report", "r1", str(report_path), "--ledger", str(path), "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["written"] == {"resolved": 2, "unresolved": 1, "error": 1, "empty_patch": 1}
    with Ledger(path) as lg:
        after = dump(lg)
        got = outcomes(lg, "r1")
        src = lg.query("SELECT DISTINCT source FROM evaluations WHERE attempt_id = ?", (aid,))
    for table, rows in before.items():  # nothing rewritten, nothing removed
        assert set(rows) <= set(after[table]), table
    assert got["unres"] == "resolved" and got["res"] == "unresolved" and got["pend"] == "resolved"
    assert got["retried"] == "unresolved"  # the official harness scores an error as not resolved
    assert [r[0] for r in src] == ["swebench_report"]


def test_import_report_infra_failure_keeps_instance_pending(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    with Ledger(path) as lg:
        make_run(lg, "r", ["a", "b"])
        add_attempt(lg, "r", "a", 1, "submitted", patch="x")
        add_attempt(lg, "r", "b", 1, "api_error", "stall_ttft")
        rp = tmp_path / "rep.json"
        rp.write_text(
            json.dumps({"error_ids": ["a"], "infra_failure_ids": ["a"], "resolved_ids": ["b", "zz"]})
        )
        res = import_report(lg, "r", rp)
        assert res.written == {"infra_failure": 1}
        assert res.no_model_outcome == ["b"] and res.not_in_run == ["zz"]
        assert outcomes(lg, "r")["a"] == "pending"
        evaluate(lg, "r-a-1", 1)
        assert outcomes(lg, "r")["a"] == "resolved"


def test_import_report_rejects_a_file_that_is_not_a_report(tmp_path: Path) -> None:
    build(tmp_path / "l.sqlite")
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    proc = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "import-report", "r1", str(bad), "--ledger", str(tmp_path / "l.sqlite")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "bad.json: not a SWE-bench run report" in proc.stderr


def test_a_run_with_nothing_final_has_no_score(tmp_path: Path) -> None:
    # The server never came up: every instance is pending. 0/N would read as a model that solved
    # nothing; the score is n/a, and says why.
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r1", ["a", "b", "c"], attempts_max=2)
        add_attempt(lg, "r1", "a", 1, "api_error", "connection", duration=1.0)
        s = summarise(lg, "r1")
        assert s["outcomes"]["pending"] == 3 and s["resolved_rate_all"]["n"] == 0
        assert s["resolved_rate_all"]["rate"] is None
        text = render_text(s)
    assert "resolved over all instances:      n/a (no instance has a final outcome yet)" in text
    # One final outcome, even an infrastructure failure, and the pending count as not resolved.
    with Ledger(tmp_path / "l.sqlite") as lg:
        add_attempt(lg, "r1", "b", 1, "api_error", "stall_ttft", duration=1.0)
        add_attempt(lg, "r1", "b", 2, "api_error", "stall_ttft", duration=1.0)
        s = summarise(lg, "r1")
    assert s["outcomes"]["infra_failed"] == 1
    assert (s["resolved_rate_all"]["k"], s["resolved_rate_all"]["n"]) == (0, 3)
