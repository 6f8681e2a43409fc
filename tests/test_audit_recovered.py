"""``audit`` and the harness's own retries, on ledger rows written by hand (real SQLite,
fingerprints by the proxy's own function): a failed request the harness sent again, the same
request, with success makes its instance ``recovered``, off the rerun list; a retry that failed
too leaves it ``infra_failed``; and failed requests no instance can be given are said, with the
flag that would attribute them, and exit 1."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ledger_helpers import add_attempt, make_run
from wedgewatch.base import vocab
from wedgewatch.ledger import Ledger
from wedgewatch.wire import fingerprint

RUN = "wrap-20260101-120000-cd34"
BOILERPLATE = "You are an expert engineer working in a repository.\nAlways answer with one command."
STATEMENTS = {
    "a-1": "The parser drops the last field of every row.\nExpected four fields, got three.",
    "b-2": "Rounding of negative amounts goes the wrong way.\nExpected -1.5 to become -2.",
    "c-3": "Title case breaks on apostrophes in words.\nEvery apostrophe starts a new word.",
}


def prompt(iid: str | None) -> list[dict[str, str]]:
    head = [{"role": "system", "content": BOILERPLATE}]
    return head if iid is None else [*head, {"role": "user", "content": f"Please fix:\n{STATEMENTS[iid]}"}]


def ledger_with(path: Path, requests: list[tuple[str | None, str]]) -> None:
    """A wrapped run whose requests, one a second, say what the instance (None: boilerplate only)
    asks, and end as told."""
    t0 = time.time() - 100
    with Ledger(path) as lg:
        lg.append(
            "harness_runs",
            {"harness_run_id": RUN, "started_at": t0, "argv_json": ["x"], "config_json": {},
             "config_hash": "h", "tool_version": "t"},
        )  # fmt: skip
        lg.append(
            "server_lives",
            {"life_id": "life-1", "run_id": RUN, "profile": "sim", "base_url": "u",
             "start_reason": vocab.RUN_START, "started_at": t0},
        )  # fmt: skip
        for n, (iid, outcome) in enumerate(requests):
            lg.append(
                "requests",
                {"request_id": f"r{n:03d}", "life_id": "life-1", "path": "/v1/chat/completions",
                 "client_stream": 0, "started_at": t0 + 1 + n, "duration": 0.5, "outcome": outcome,
                 "detail_json": {"fp": fingerprint.of_messages(prompt(iid))}},
            )  # fmt: skip


def write_results(tmp_path: Path, verdicts: dict[str, str]) -> Path:
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps({"instance_id": k, "outcome": v}) + "\n" for k, v in verdicts.items()))
    return path


def write_suite(tmp_path: Path) -> Path:
    path = tmp_path / "suite.jsonl"
    path.write_text(
        "".join(json.dumps({"instance_id": k, "problem_statement": v}) + "\n" for k, v in STATEMENTS.items())
    )
    return path


def audit(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "wedgewatch", "audit", str(tmp_path / "results.jsonl")]
    argv += ["--ledger", str(tmp_path / "l.sqlite"), *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


STALL, OK, HTTP503 = vocab.STALL_MIDSTREAM, vocab.OK, vocab.upstream_http(503)


def test_a_failed_request_sent_again_with_success_is_recovered_not_rerun(tmp_path: Path) -> None:
    ledger_with(
        tmp_path / "l.sqlite",
        [("a-1", OK), ("b-2", STALL), ("c-3", HTTP503), ("b-2", OK), ("c-3", HTTP503), ("a-1", OK)],
    )
    write_results(tmp_path, {"a-1": "resolved", "b-2": "resolved", "c-3": "unresolved"})
    rerun = tmp_path / "rerun.txt"
    done = audit(tmp_path, "--suite", str(write_suite(tmp_path)), "--json", "--rerun-out", str(rerun))
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    per = {i["instance_id"]: i for i in result["instances"]}
    assert per["b-2"]["outcome"] == vocab.RECOVERED and per["b-2"][vocab.RECOVERED] == 1
    assert per["b-2"]["stalls"] == 1, "the stall happened, and is shown"
    assert per["c-3"]["outcome"] == vocab.INFRA_FAILED, "its retry failed too: nothing recovered it"
    assert per["a-1"]["outcome"] == "resolved"
    assert result[vocab.INFRA_FAILED] == ["c-3"] and result[vocab.RECOVERED] == ["b-2"]
    assert rerun.read_text() == "c-3\n", "the recovered instance is not rerun"
    # Its verdict stands: resolved by the harness after the retry, it counts in the honest score.
    assert (result["honest"]["k"], result["honest"]["n"]) == (2, 2)
    assert result["runs"][0][vocab.RECOVERED] == 1
    assert result["attribution"]["message"] is None
    text = audit(tmp_path, "--suite", str(tmp_path / "suite.jsonl")).stdout
    assert "honest score (resolved): 2/2" in text and "infra_failed 1, recovered 1 beside it" in text


def test_failed_requests_audit_cannot_attribute_are_said_with_the_flag_and_exit_1(tmp_path: Path) -> None:
    # No --suite, no tags, and a generic results file: nothing gives the requests an instance.
    ledger_with(tmp_path / "l.sqlite", [("a-1", OK), ("b-2", STALL), ("c-3", HTTP503), ("a-1", OK)])
    write_results(tmp_path, {"a-1": "resolved", "b-2": "unresolved", "c-3": "unresolved"})
    done = audit(tmp_path)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "--suite" in done.stderr
    assert "2 failed requests could not be attributed to one instance" in done.stderr
    assert "honest score (resolved): not known: 2 failed requests" in done.stdout
    assert "infra_failed 0" in done.stdout, "beside it, still, but not as the honest score"
    as_json = audit(tmp_path, "--json")
    assert as_json.returncode == 1
    att = json.loads(as_json.stdout)["attribution"]
    assert (att["failed_unattributed"], att["failed_ambiguous"], att["flag"]) == (2, 0, "--suite")
    # With the suite the same requests are attributed: the score is known, exit 0.
    with_suite = audit(tmp_path, "--suite", str(write_suite(tmp_path)), "--json")
    assert with_suite.returncode == 0, with_suite.stderr
    assert json.loads(with_suite.stdout)[vocab.INFRA_FAILED] == ["b-2", "c-3"]


def test_with_the_suite_an_unattributable_failure_names_tags(tmp_path: Path) -> None:
    ledger_with(tmp_path / "l.sqlite", [("a-1", OK), (None, STALL)])  # boilerplate only: nobody's
    write_results(tmp_path, {"a-1": "resolved", "b-2": "unresolved"})
    done = audit(tmp_path, "--suite", str(write_suite(tmp_path)))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "x-wedgewatch-tag" in done.stderr and "--suite" not in done.stderr


def test_an_unattributed_failure_the_harness_retried_with_success_harms_nobody(tmp_path: Path) -> None:
    ledger_with(tmp_path / "l.sqlite", [(None, STALL), (None, OK), ("a-1", OK)])
    write_results(tmp_path, {"a-1": "resolved", "b-2": "unresolved"})
    done = audit(tmp_path, "--suite", str(write_suite(tmp_path)), "--json")
    assert done.returncode == 0, done.stderr
    (run,) = json.loads(done.stdout)["runs"]
    assert run["infra_unattributed"] == [] and run[vocab.RECOVERED] == 1


def test_a_runs_summary_counts_the_instances_its_agent_carried_through_a_failure(tmp_path: Path) -> None:
    """Under ``wedgewatch run`` too: an instance whose final attempt had a failed request the agent
    sent again with success keeps its model outcome, and is counted ``recovered`` beside it."""
    db = tmp_path / "run.sqlite"
    with Ledger(db) as lg:
        make_run(lg, "r1", ["a-1", "b-2", "c-3"])
        t0 = time.time() - 50
        for n, (iid, outcome) in enumerate(
            [("a-1", STALL), ("a-1", OK), ("b-2", HTTP503), ("b-2", OK), ("b-2", HTTP503), ("c-3", OK)]
        ):
            lg.append(
                "requests",
                {"request_id": f"q{n}", "attempt_id": f"r1-{iid}-1", "path": "/v1/chat/completions",
                 "client_stream": 0, "started_at": t0 + n, "duration": 0.5, "outcome": outcome,
                 "detail_json": {"fp": fingerprint.of_messages(prompt(iid))}},
            )  # fmt: skip
        # b-2's last failure was never sent again: not recovered, though its attempt submitted.
        for iid in ("a-1", "b-2", "c-3"):
            add_attempt(lg, "r1", iid, 1, vocab.SUBMITTED, patch="diff", resolved=1)
    argv = [sys.executable, "-m", "wedgewatch", "report", "r1", "--ledger", str(db)]
    as_json = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=60)
    assert as_json.returncode == 0, as_json.stderr
    s = json.loads(as_json.stdout)
    assert s[vocab.RECOVERED] == 1 and s["outcomes"][vocab.RESOLVED] == 3, "recovered is beside, not apart"
    text = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    assert re.search(r"recovered\s*│\s*1\s*│", text), text
    compare = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "compare", "r1", "r1", "--ledger", str(db)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert compare.returncode == 0, compare.stderr
    (row,) = [line for line in compare.stdout.splitlines() if "recovered instances" in line]
    assert row.split()[-2:] == ["1", "1"]
