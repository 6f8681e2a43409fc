"""``wedgewatch scan``: the story's signature in result files of other harnesses (SWE-bench reports,
mini-swe-agent trajectories written by mini-swe-agent itself, generic JSONL/CSV) and in
wedgewatch's own export; no signature in natural durations; one line and exit 2 for a bad file."""

from __future__ import annotations

import csv
import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ledger_helpers import add_attempt, make_run
from wedgewatch.analysis import stats
from wedgewatch.analysis.export import render
from wedgewatch.analysis.scan import scan
from wedgewatch.analysis.scan.clusters import find_clusters
from wedgewatch.analysis.scan.report import render_text, status_kind
from wedgewatch.cli import main
from wedgewatch.ledger import Ledger

IDS = [f"django__django-{11000 + n}" for n in range(20)]
HUNG = IDS[:6]


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _report(path: Path, resolved: list[str], unresolved: list[str], empty: list[str]) -> Path:
    """The official harness's run report (swebench.harness.reporting.make_run_report's keys)."""
    ids = sorted({*resolved, *unresolved, *empty})
    path.write_text(
        json.dumps(
            {
                "total_instances": len(ids),
                "submitted_instances": len(ids),
                "completed_instances": len(resolved) + len(unresolved),
                "resolved_instances": len(resolved),
                "unresolved_instances": len(unresolved),
                "empty_patch_instances": len(empty),
                "error_instances": 0,
                "completed_ids": sorted([*resolved, *unresolved]),
                "incomplete_ids": [],
                "empty_patch_ids": sorted(empty),
                "submitted_ids": ids,
                "resolved_ids": sorted(resolved),
                "unresolved_ids": sorted(unresolved),
                "infra_failure_ids": [],
                "error_ids": [],
                "schema_version": 2,
            },
            indent=4,
        )
    )
    return path


def _story_files(tmp: Path) -> tuple[Path, Path, list[str]]:
    """The story's 20-instance run: six instances ended at 1,801.6-1,801.9 s with empty patches."""
    rng = random.Random(7)
    rows = []
    for n, iid in enumerate(IDS):
        if iid in HUNG:
            rows.append({"instance_id": iid, "duration": 1801.6 + 0.06 * n, "exit_status": "Submitted"})
        else:
            rows.append(
                {"instance_id": iid, "duration": round(rng.uniform(180, 1500), 1), "exit_status": "Submitted"}
            )
    resolved = IDS[6:14]
    results = _write_jsonl(tmp / "results.jsonl", rows)
    report = _report(tmp / "report.json", resolved, IDS[14:], HUNG)
    return results, report, resolved


def test_the_story_signature_is_found_and_the_score_recomputed(tmp_path: Path) -> None:
    results, report, _ = _story_files(tmp_path)
    r = scan([results, report])
    assert r["signature"]
    [c] = r["clusters"]
    assert c["count"] == 6 and c["lo"] >= 1801.6 and c["hi"] <= 1801.95 and c["spread"] < 0.4
    first = c["explanations"][0]
    assert (first["timeout"], first["tries"], first["source"]) == (600.0, 3, "hint")
    assert 1.5 < first["backoff"] < 2.0
    assert sorted(i["instance_id"] for i in r["suspicious"]) == HUNG
    assert all("cluster" in i["evidence"] and "empty_patch" in i["evidence"] for i in r["suspicious"])
    s = r["score"]
    assert (s["as_scored"]["k"], s["as_scored"]["n"]) == (8, 20)
    assert (s["reclassified"]["k"], s["reclassified"]["n"]) == (8, 14)
    assert s["reclassified"]["ci95"] == pytest.approx(list(stats.wilson(8, 14)))
    assert s["infra_reclassified"] == 6
    assert "3 x 600 s" in r["verdict"][0]


def test_cli_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results, report, _ = _story_files(tmp_path)
    with pytest.raises(SystemExit) as ex:
        main(["scan", str(results), str(report)])
    assert ex.value.code == 0
    out = capsys.readouterr().out
    assert "suspicious instances (6):" in out
    assert "8/14 = 57.1%" in out and "8/20 = 40.0%" in out
    with pytest.raises(SystemExit):
        main(["scan", str(results), "--json", "--timeout-hint", "240"])
    r = json.loads(capsys.readouterr().out)
    assert r["timeouts_considered"] == [600.0, 240.0]
    assert r["score"] is None and len(r["suspicious"]) == 6  # no outcomes without the report


def test_a_cluster_at_another_timeout_is_found(tmp_path: Path) -> None:
    """The used server: 15 of 15 instances ended at 721-727 s, three 240-second attempts."""
    rng = random.Random(3)
    rows = [
        {"instance_id": f"i{n}", "elapsed": 721 + 6 * rng.random(), "status": "failed"} for n in range(15)
    ]
    path = _write_jsonl(tmp_path / "used.jsonl", rows)
    r = scan([path], hints=[240.0])
    [c] = r["clusters"]
    assert c["count"] == 15 and c["lo"] >= 721 and c["hi"] <= 727
    assert (c["explanations"][0]["timeout"], c["explanations"][0]["tries"]) == (240.0, 3)
    # Without the hint the reading is ambiguous but 3 x 240 s is among the readings offered.
    r2 = scan([path])
    readings = {(e["timeout"], e["tries"]) for e in r2["clusters"][0]["explanations"]}
    assert (240.0, 3) in readings
    assert len(r2["suspicious"]) == 15  # the cluster alone is evidence


def test_a_cluster_among_natural_durations(tmp_path: Path) -> None:
    rng = random.Random(11)
    natural = [math.exp(rng.gauss(math.log(500), 0.6)) for _ in range(40)]
    hung = [721.0 + 6 * rng.random() for _ in range(7)]
    clusters = find_clusters(natural + hung)
    assert len(clusters) == 1
    assert sorted(clusters[0].members) == list(range(40, 47))


@pytest.mark.parametrize("seed", range(8))
def test_natural_durations_give_no_cluster(seed: int) -> None:
    rng = random.Random(seed)
    assert find_clusters([math.exp(rng.gauss(math.log(600), 0.7)) for _ in range(60)]) == []
    assert find_clusters([rng.uniform(100, 1900) for _ in range(200)]) == []


def test_a_clean_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(5)
    path = tmp_path / "clean.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, ["instance_id", "wall_time", "status", "resolved"])
        w.writeheader()
        for n in range(30):
            w.writerow({"instance_id": f"i{n}", "wall_time": f"{rng.uniform(60, 1200):.1f}",
                        "status": "submitted", "resolved": n % 2})  # fmt: skip
    with pytest.raises(SystemExit) as ex:
        main(["scan", str(path)])
    assert ex.value.code == 0
    out = capsys.readouterr().out
    assert "no timeout signature" in out
    assert "15/30 = 50.0%" in out


def test_statuses_and_single_timeout_matches(tmp_path: Path) -> None:
    rng = random.Random(2)
    rows = [
        {"instance_id": f"n{n}", "duration": rng.uniform(100, 1400), "error": "", "resolved": False}
        for n in range(20)
    ]
    rows += [
        {
            "instance_id": "conn",
            "duration": 40.0,
            "error": "openai.APIConnectionError: Connection error.",
            "resolved": False,
        },
        {"instance_id": "flag", "duration": 33.0, "api_error": True, "resolved": False},
        {"instance_id": "bool", "duration": 50.0, "timed_out": True, "timeout": 600, "resolved": False},
        {"instance_id": "retried", "duration": 1801.3, "error": "", "resolved": False},  # 3 x 600 s, alone
        {"instance_id": "one-try", "duration": 603.0, "error": "", "resolved": False},  # 1 x 600 s: natural?
        {"instance_id": "won", "duration": 1202.0, "error": "Request timed out", "resolved": True},
    ]
    r = scan([_write_jsonl(tmp_path / "mixed.jsonl", rows)])
    sus = {i["instance_id"]: i["evidence"] for i in r["suspicious"]}
    assert set(sus) == {"conn", "flag", "retried", "bool"}
    assert sus["bool"] == ["status:timeout"]
    assert sus["conn"] == ["status:api_error"] and sus["flag"] == ["api_error"]
    assert sus["retried"] == ["timeout_match:3x600s"]
    assert [i["instance_id"] for i in r["resolved_with_evidence"]] == ["won"]
    assert (r["score"]["reclassified"]["k"], r["score"]["reclassified"]["n"]) == (1, 22)
    assert (r["score"]["as_scored"]["k"], r["score"]["as_scored"]["n"]) == (1, 26)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("APITimeoutError Request timed out.", "timeout"),
        ("Timeout litellm.Timeout: Connection timed out after 600.0 seconds.", "timeout"),
        ("api_error:stall_midstream", "timeout"),
        ("APIConnectionError Connection error.", "api_error"),
        ("InternalServerError Error code: 503", "api_error"),
        ("Submitted", None),
        ("LimitsExceeded", None),
        ("TimeExceeded", None),
        ("pip install failed; change requested", None),
    ],
)
def test_status_kinds(text: str, kind: str | None) -> None:
    assert status_kind(text) == kind


def _mini_trajectory(out: Path, iid: str, outputs: list[dict[str, Any]], hang: bool = False) -> str:
    """Run mini-swe-agent's own DefaultAgent with its DeterministicModel: the trajectory file is
    what mini-swe-agent writes. With ``hang`` the model raises the OpenAI SDK's timeout once its
    outputs run out. Returns the exit status."""
    import httpx
    import openai
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.test_models import DeterministicModel
    from minisweagent.run.benchmarks.swebench import update_preds_file

    class HangingModel(DeterministicModel):
        def query(self, messages: list[dict[str, str]], **kwargs: Any) -> dict[str, Any]:
            if hang and self.current_index + 1 >= len(self.config.outputs):
                raise openai.APITimeoutError(
                    request=httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
                )
            return dict(super().query(messages, **kwargs))

    agent = DefaultAgent(
        HangingModel(outputs=outputs),
        LocalEnvironment(cwd=str(out)),
        system_template="You fix bugs.",
        instance_template="{{task}}",
        step_limit=3,
        output_path=out / iid / f"{iid}.traj.json",
    )
    try:
        info = agent.run("fix it")
        status, result = info.get("exit_status"), info.get("submission")
    except Exception as exc:  # what mini-swe-agent's batch runner does
        status, result = type(exc).__name__, ""
        agent.save(
            agent.config.output_path,
            {"info": {"exit_status": status, "submission": result}, "instance_id": iid},
        )
    update_preds_file(out / "preds.json", iid, "sim-model", result or "")
    return str(status)


def test_mini_swe_agent_trajectories_preds_and_report(tmp_path: Path) -> None:
    from minisweagent.models.test_models import make_output

    out = tmp_path / "mini"
    out.mkdir()
    patch = "diff --git a/x b/x"
    statuses = {
        "a__a-1": _mini_trajectory(out, "a__a-1", [make_output("ls", [{"command": "echo hi"}])], hang=True),
        "a__a-2": _mini_trajectory(out, "a__a-2", [make_output("done", [{"command": f"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo '{patch}'"}])]),
        "a__a-3": _mini_trajectory(out, "a__a-3", [make_output("ls", [{"command": "true"}])] * 4),
    }  # fmt: skip
    assert statuses == {"a__a-1": "APITimeoutError", "a__a-2": "Submitted", "a__a-3": "LimitsExceeded"}
    report = _report(tmp_path / "report.json", ["a__a-2"], [], ["a__a-1", "a__a-3"])
    r = scan([out, report])  # a directory: its trajectories and preds.json
    kinds = sorted(f["kind"] for f in r["files"])
    assert kinds == ["predictions (preds.json)", "swebench report", *["trajectory (mini-swe-agent-1.1)"] * 3]
    [s] = r["suspicious"]
    assert s["instance_id"] == "a__a-1" and s["outcome"] == "empty_patch"
    assert s["evidence"] == ["status:timeout", "empty_patch"]
    assert "APITimeoutError" in s["status"]
    assert (r["score"]["as_scored"]["k"], r["score"]["as_scored"]["n"]) == (1, 3)
    assert (r["score"]["reclassified"]["k"], r["score"]["reclassified"]["n"]) == (1, 2)


def test_wedgewatch_results_export_is_already_separated(tmp_path: Path) -> None:
    """api_error attempts end at the proxy's 240 s deadline (a cluster), but wedgewatch already
    counts an instance whose every attempt failed as infra_failed: the score is unaffected."""
    ids = [f"w{n}" for n in range(12)]
    rng = random.Random(4)
    with Ledger(tmp_path / "l.sqlite") as lg:
        make_run(lg, "r", ids, attempts_max=3)
        for n, iid in enumerate(ids):
            if n < 2:  # infra_failed: three stalls
                for no in (1, 2, 3):
                    add_attempt(
                        lg, "r", iid, no, "api_error", reason="total_timeout", duration=240.2 + 0.1 * no
                    )
            elif n < 5:  # a stall, then the retry ended on the model's side (resolved but for one)
                add_attempt(lg, "r", iid, 1, "api_error", reason="total_timeout", duration=240.1 + 0.1 * n)
                add_attempt(
                    lg,
                    "r",
                    iid,
                    2,
                    "submitted",
                    patch="diff\n",
                    resolved=int(n < 4),
                    duration=rng.uniform(60, 900),
                )
            else:
                add_attempt(
                    lg,
                    "r",
                    iid,
                    1,
                    "submitted",
                    patch="diff\n",
                    resolved=n % 2,
                    duration=rng.uniform(60, 900),
                )
        path = tmp_path / "results.jsonl"
        path.write_text(render(lg, "r", "results"))
    r = scan([path])
    assert r["files"][0]["kind"] == "wedgewatch results"
    [c] = r["clusters"]
    assert c["count"] == 9 and c["explanations"][0]["timeout"] == 240.0
    assert r["suspicious"] == [] and r["excluded_by_file"] == 2
    assert r["resolved_with_evidence"] == []  # a retried stall is no evidence against the outcome
    assert (r["score"]["as_scored"]["k"], r["score"]["as_scored"]["n"]) == (6, 10)
    # The file's own infra_failed instances are counted beside its score, not shown as 0.
    assert r["score"]["infra_failed_in_file"] == 2 and r["score"]["infra_failed"] == 2
    text = render_text(r)
    assert "infra_failed 2 (the file's own, apart)" in text and "infra_failed 2 (change +0.0 pts)" in text
    assert any("score is unaffected" in v for v in r["verdict"])


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("shape.json", '{"hello": 1}', "unknown JSON shape"),
        ("notjson.json", "this is not json\n", "neither JSON nor JSONL"),
        ("empty.jsonl", "", "empty file"),
        ("useless.csv", "a,b\n1,2\n", "no duration-like"),
        ("scalar.json", "3", "not a result file"),
    ],
)
def test_bad_files_are_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(SystemExit) as ex:
        main(["scan", str(path)])
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and message in err


def test_a_missing_file_exits_2_from_the_shell(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "scan", str(tmp_path / "nope.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "nope.json: cannot read" in proc.stderr


def test_a_verdict_in_the_status_field_lets_the_score_be_recomputed(tmp_path: Path) -> None:
    rng = random.Random(5)
    rows = [
        {"instance_id": f"r__x-{i}", "status": "unresolved", "duration": 1801.6 + rng.random() * 0.3}
        for i in range(6)
    ] + [
        {
            "instance_id": f"r__y-{i}",
            "status": "resolved" if i % 2 else "Unresolved",
            "duration": rng.lognormvariate(5.5, 0.5),
        }
        for i in range(14)
    ]
    result = scan([_write_jsonl(tmp_path / "results.jsonl", rows)])
    score = result["score"]
    assert score["as_scored"]["k"] == 7 and score["as_scored"]["n"] == 20
    assert score["infra_reclassified"] == 6
    assert score["reclassified"]["k"] == 7 and score["reclassified"]["n"] == 14
