"""End to end: the real Inspect AI (``inspect eval`` on a small task of ours, 4 samples at a time)
under ``wedgewatch wrap``, against the simulator wedging mid-run; its ``.eval`` log is read and
audited against the simulator's own fault log, attributed by content fingerprints; a second wrap
with ``--sample-id {rerun}`` runs only the infra-failed samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from wedgewatch.suites import load_bundled

IDS = [i["instance_id"] for i in load_bundled()][:8]
KEYWORD = "discount"  # only wedgewatch__shopkit-0001's statement (the 6th sample) has it
INSPECT = str(Path(sys.executable).with_name("inspect"))


@pytest.mark.long
def test_inspect_eval_log_under_wrap_is_audited_against_the_simulators_record(tmp_path: Path) -> None:
    by_id = {i["instance_id"]: i for i in load_bundled()}
    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(json.dumps(by_id[i]) + "\n" for i in IDS))
    (tmp_path / "wedge.toml").write_text(
        f'[[fault]]\nwhen.contains = "{KEYWORD}"\ntimes = 1\naction = "wedge"\nafter_tokens = 2\n'
    )
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f"""
[server]
scenario = "{tmp_path / "wedge.toml"}"
time_scale = 20
args = ["--fault-log", "{tmp_path / "faults.jsonl"}"]
log_dir = "{tmp_path / "logs"}"
scrape_interval = 0.25
wedge_window = 1.5
canary_timeout = 1.0
restart_backoff = 0.1

[watchdog]
# fail, not resume: the subject is attributing each request the simulator struck, which a
# resume would carry on to the next life instead of failing (tests/test_wrap_one_pass.py resumes).
on_wedge = "fail"
ttft_timeout = 5
stall_timeout = 1.5

[run]
ledger = "{tmp_path / "ledger.sqlite"}"
"""
    )
    # Inspect takes a task file relative to its working directory.
    (tmp_path / "inspect_task.py").write_text(Path(__file__).with_name("inspect_task.py").read_text())
    argv = [sys.executable, "-m", "wedgewatch", "wrap", str(cfg), "--", INSPECT, "eval", "inspect_task.py"]
    argv += ["--model", "openai-api/wedgewatch/sim-model", "--max-connections", "4", "--max-samples", "4"]
    argv += [
        "--max-retries",
        "0",
        "--no-fail-on-error",
        "--max-tokens",
        "30",
        "--log-dir",
        str(tmp_path / "ilogs"),
    ]
    env = {**os.environ, "SUITE": str(suite), "INSPECT_DISPLAY": "none", "INSPECT_LOG_LEVEL": "warning"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (log,) = (tmp_path / "ilogs").glob("*.eval")

    statements = {iid: by_id[iid]["problem_statement"].strip() for iid in IDS}
    truth: Counter[str] = Counter()
    for line in (tmp_path / "faults.jsonl").read_text().splitlines():
        first = json.loads(line)["first_user"]
        truth.update(iid for iid, text in statements.items() if text in first)
    assert truth["wedgewatch__shopkit-0001"] == 1

    ledger = str(tmp_path / "ledger.sqlite")
    audit_argv = [sys.executable, "-m", "wedgewatch", "audit", str(log), "--ledger", ledger, "--json"]
    audit_argv += ["--suite", str(suite), "--rerun-out", str(tmp_path / "rerun.txt")]
    audit = subprocess.run(audit_argv, capture_output=True, text=True, timeout=60)
    assert audit.returncode == 0, audit.stderr
    result = json.loads(audit.stdout)
    (run,) = result["runs"]
    assert run["by"]["fingerprint"] == run["requests"] == len(IDS), "one generation per sample"
    assert run["infra_unattributed"] == [] and run["infra_ambiguous"] == []
    per = {i["instance_id"]: i for i in result["instances"]}
    for iid in IDS:
        assert per[iid]["stalls"] + per[iid]["upstream_errors"] == truth[iid], (iid, per[iid], truth)
        assert per[iid]["requests"] == 1
        assert per[iid]["verdict"] == ("error:SampleError" if truth[iid] else "resolved"), per[iid]
    infra = sorted(iid for iid in IDS if truth[iid])
    assert result["infra_failed"] == infra
    assert result["published"]["k"] == result["honest"]["k"] == len(IDS) - len(infra)
    assert result["honest"]["n"] == len(IDS) - len(infra)
    # Inspect's own selection syntax: --sample-id takes a comma-separated list.
    assert (tmp_path / "rerun.txt").read_text() == ",".join(infra) + "\n"

    # A second wrap, the server healthy, runs only those samples through Inspect's --sample-id;
    # audit over both logs takes each instance's last verdict that was not infrastructure.
    (tmp_path / "wedge.toml").write_text("")
    again = [sys.executable, "-m", "wedgewatch", "wrap", str(cfg), "--rerun", str(tmp_path / "rerun.txt")]
    again += ["--", *argv[argv.index("--") + 1 :], "--sample-id", "{rerun}"]
    (tmp_path / "ilogs2").mkdir()
    again[again.index(str(tmp_path / "ilogs"))] = str(tmp_path / "ilogs2")
    done = subprocess.run(again, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (log2,) = (tmp_path / "ilogs2").glob("*.eval")
    both_argv = [sys.executable, "-m", "wedgewatch", "audit", str(log), str(log2), "--ledger", ledger]
    both = subprocess.run(
        [*both_argv, "--suite", str(suite), "--json"], capture_output=True, text=True, timeout=60
    )
    assert both.returncode == 0, both.stderr
    final = json.loads(both.stdout)
    _, second = final["runs"]  # in the order the harness runs were wrapped
    assert second["requests"] == len(infra), "the rerun sent one request per infra-failed sample"
    assert final["infra_failed"] == []
    per2 = {i["instance_id"]: i for i in final["instances"]}
    for iid in infra:
        assert [r["outcome"] for r in per2[iid]["runs"]] == ["infra_failed", "resolved"], per2[iid]
    assert final["honest"]["k"] == final["honest"]["n"] == len(IDS)
