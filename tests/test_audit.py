"""``audit``'s attribution and verdicts on ledger rows written by hand (real SQLite), with
fingerprints made by the proxy's own function: tags first, then distinctive content; shared
boilerplate decides nothing; a request matching two instances is ambiguous; bad input is exit 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from wedgewatch.analysis.audit import audit, render_text, rerun_lines
from wedgewatch.base.errors import BadInput
from wedgewatch.ledger import Ledger
from wedgewatch.wire import fingerprint

BOILERPLATE = "You are an expert engineer working in a repository.\nAlways answer with one command."
STATEMENTS = {
    "a-1": "The parser drops the last field of every row.\nExpected four fields, got three.",
    "b-2": "Rounding of negative amounts goes the wrong way.\nExpected -1.5 to become -2.",
    "c-3": "Title case breaks on apostrophes in words.\nExpected four fields, got three.",  # shares a line with a-1
}


def request(
    ledger: Ledger,
    n: int,
    run: str,
    messages: list[dict[str, str]],
    outcome: str = "ok",
    tag: str | None = None,
) -> None:
    start = {
        "request_id": f"r{n:04d}",
        "attempt_id": tag,
        "life_id": f"{run}-life",
        "path": "/v1/chat/completions",
        "client_stream": 0,
        "started_at": time.time(),
    }
    # Its start and its end, as the proxy writes them.
    ledger.append("request_starts", start)
    ledger.append(
        "requests",
        {
            **start,
            "duration": 0.1,
            "outcome": outcome,
            "detail_json": {"fp": fingerprint.of_messages(messages)},
        },
    )


def prompt(iid: str, extra: str = "") -> list[dict[str, str]]:
    return [
        {"role": "system", "content": BOILERPLATE},
        {"role": "user", "content": f"Please fix:\n{STATEMENTS[iid]}\n{extra}"},
    ]


def make_ledger(tmp_path: Path, run: str = "wrap-1") -> Ledger:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    now = time.time()
    ledger.append(
        "harness_runs",
        {
            "harness_run_id": run,
            "started_at": now - 60,
            "argv_json": ["x"],
            "config_json": {},
            "config_hash": "h",
            "tool_version": "t",
        },
    )
    ledger.append(
        "server_lives",
        {
            "life_id": f"{run}-life",
            "run_id": run,
            "profile": "sim",
            "base_url": "u",
            "start_reason": "run_start",
            "started_at": now - 60,
        },
    )
    return ledger


def results(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def suite(tmp_path: Path) -> Path:
    path = tmp_path / "suite.jsonl"
    path.write_text(
        "".join(json.dumps({"instance_id": k, "problem_statement": v}) + "\n" for k, v in STATEMENTS.items())
    )
    return path


def test_fingerprints_attribute_despite_boilerplate_and_shared_lines(tmp_path: Path) -> None:
    ledger = make_ledger(tmp_path)
    request(ledger, 1, "wrap-1", prompt("a-1"))
    request(ledger, 2, "wrap-1", prompt("b-2"), outcome="stall_midstream")
    request(ledger, 3, "wrap-1", prompt("c-3"))
    request(
        ledger, 4, "wrap-1", [{"role": "system", "content": BOILERPLATE}], outcome="stall_ttft"
    )  # boilerplate only
    # Quotes both a-1's and b-2's own lines: two owners, so nobody's.
    request(ledger, 5, "wrap-1", prompt("a-1", STATEMENTS["b-2"]), outcome="connection")
    request(ledger, 6, "wrap-1", [{"role": "user", "content": "anything"}], outcome="stall_ttft", tag="c-3")
    ledger.close()
    rows = [
        {"instance_id": "a-1", "outcome": "resolved"},
        {"instance_id": "b-2", "outcome": "error", "status": "APIError"},
        {"instance_id": "c-3", "outcome": "unresolved"},
    ]
    result = audit([results(tmp_path, rows)], tmp_path / "ledger.sqlite", suite(tmp_path))
    (run,) = result["runs"]
    assert run["by"] == {"fingerprint": 3, "unattributed": 1, "ambiguous": 1, "tag": 1}
    assert [e["request_id"] for e in run["infra_unattributed"]] == ["r0004"]
    assert run["infra_ambiguous"] == [
        {"request_id": "r0005", "outcome": "connection", "candidates": ["a-1", "b-2"]}
    ]
    per = {i["instance_id"]: i for i in result["instances"]}
    assert per["a-1"]["outcome"] == "resolved" and per["a-1"]["ambiguous"] == 1
    assert per["b-2"]["outcome"] == "infra_failed" and per["b-2"]["stalls"] == 1
    assert per["c-3"]["outcome"] == "infra_failed", "its tag attributes the stalled request"
    assert result["infra_failed"] == ["b-2", "c-3"]
    assert result["published"]["k"] == 1 and result["published"]["n"] == 3
    assert result["honest"]["k"] == 1 and result["honest"]["n"] == 1


def test_rerun_selection_in_each_harness_syntax() -> None:
    ids = ["django__django-1", "sympy__sympy-2"]
    (regex,) = rerun_lines(ids, "miniswe")
    import re

    assert [i for i in [*ids, "django__django-10", "x"] if re.match(regex, i)] == ids
    assert rerun_lines(ids, "swebench") == ids == rerun_lines(ids, "ids")
    assert rerun_lines(ids, "inspect") == ["django__django-1,sympy__sympy-2"]
    with pytest.raises(BadInput, match="--rerun-format"):
        rerun_lines(ids, "nope")


@pytest.mark.parametrize(
    ("content", "expected"),
    [("not json at all {", "neither JSON nor JSONL"), ('{"weird": 1}', "unknown JSON shape")],
)
def test_a_broken_results_file_is_one_line_and_exit_2(tmp_path: Path, content: str, expected: str) -> None:
    make_ledger(tmp_path).close()
    bad = tmp_path / "results.json"
    bad.write_text(content)
    done = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "audit", str(bad), "--ledger", str(tmp_path / "ledger.sqlite")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and str(bad) in done.stderr and expected in done.stderr


def test_ledger_checks_name_what_is_missing(tmp_path: Path) -> None:
    from wedgewatch.ledger import checks

    ledger = make_ledger(tmp_path)  # a harness run and a server life, neither ended
    request(ledger, 1, "wrap-1", prompt("a-1"))
    request(ledger, 2, "wrap-2", prompt("b-2"))  # a life nobody recorded
    assert checks.problems(ledger) == [
        "server life wrap-1-life has no end",
        "harness run wrap-1 has no end",
        "requests name server life wrap-2-life, which has no row",
        "request_starts name server life wrap-2-life, which has no row",
    ]
    ledger.append(
        "harness_run_ends", {"harness_run_id": "wrap-1", "ended_at": time.time(), "end_reason": "exited"}
    )
    ledger.append(
        "server_life_ends", {"life_id": "wrap-1-life", "ended_at": time.time(), "end_reason": "stop"}
    )
    assert checks.problems(ledger) == [
        "requests name server life wrap-2-life, which has no row",
        "request_starts name server life wrap-2-life, which has no row",
    ]
    ledger.close()


def test_harbor_trial_results_and_openhands_output_are_read(tmp_path: Path) -> None:
    from wedgewatch.analysis.audit.results import read_results, verdict

    trial = {
        "task_name": "hello-world",
        "trial_name": "hello-world__abc",
        "trial_uri": "file:///jobs/x",
        "verifier_result": {"rewards": {"reward": 1.0}},
        "exception_info": None,
        "started_at": "2026-12-01T10:00:00",
        "finished_at": "2026-12-01T10:02:30",
    }
    failed = {**trial, "task_name": "fizzbuzz", "verifier_result": None}
    failed["exception_info"] = {"exception_type": "AgentTimeoutError", "exception_message": "600 s"}
    (tmp_path / "t1").mkdir()
    (tmp_path / "t2").mkdir()
    (tmp_path / "t1" / "result.json").write_text(json.dumps(trial))
    (tmp_path / "t2" / "result.json").write_text(json.dumps(failed))
    oh = tmp_path / "output.jsonl"
    oh.write_text(
        json.dumps(
            {"instance_id": "x__y-1", "test_result": {"git_patch": "diff --git a/f b/f\n"}, "error": None}
        )
        + "\n"
        + json.dumps(
            {"instance_id": "x__y-2", "test_result": {"git_patch": ""}, "error": "RuntimeError: agent stuck"}
        )
        + "\n"
    )
    files = read_results([tmp_path / "t1" / "result.json", tmp_path / "t2" / "result.json", oh])
    assert [f.kind for f in files] == ["harbor trial result", "harbor trial result", "openhands output"]
    got = {fact.instance_id: verdict([fact]) for f in files for fact in f.facts}
    assert got == {
        "hello-world": "resolved",
        "fizzbuzz": "error:AgentTimeoutError",
        "x__y-1": "submitted",
        "x__y-2": "error:Error",
    }


def _documented_verdicts() -> list[str]:
    """The harness verdicts docs/wrap.md lists, read from its table: the test follows the docs."""
    doc = (Path(__file__).parent.parent / "docs" / "wrap.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| harness verdict |"))
    words = re.findall(r"`([a-z_]+)`", row.split(";")[0])  # the list, not what follows it
    assert {"resolved", "submitted", "empty_patch"} <= set(words), row
    return words


@pytest.mark.parametrize("word", _documented_verdicts())
@pytest.mark.parametrize("key", ["outcome", "status"])
def test_every_verdict_the_docs_list_is_read_as_itself(tmp_path: Path, key: str, word: str) -> None:
    # "error" is what a file writes beside the error it names; alone it is no verdict of its own.
    make_ledger(tmp_path).close()
    rows = [{"instance_id": iid, key: word.upper() if iid == "c-3" else word} for iid in STATEMENTS]
    result = audit([results(tmp_path, rows)], tmp_path / "ledger.sqlite", suite(tmp_path))
    assert [i["verdict"] for i in result["instances"]] == [word] * 3


def test_the_published_score_counts_the_submitted_instances_the_file_says(tmp_path: Path) -> None:
    make_ledger(tmp_path).close()
    rows = [
        {"instance_id": "a-1", "outcome": "submitted"},
        {"instance_id": "b-2", "status": "submitted"},
        {"instance_id": "c-3", "outcome": "empty_patch"},
    ]
    result = audit([results(tmp_path, rows)], tmp_path / "ledger.sqlite", suite(tmp_path))
    assert result["success"] == "submitted"
    assert (result["published"]["k"], result["published"]["n"]) == (2, 3)
    assert "published score (submitted): 2/3" in render_text(result)
