"""End to end: a plain script harness (the OpenAI SDK with its defaults, no tags, 4 threads
interleaving, every prompt wrapped in the same boilerplate) under ``wedgewatch wrap``, against
the simulator wedging mid-run. Attribution by content fingerprints alone, checked against the
simulator's own fault log."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from wedgewatch.suites import load_bundled

IDS = [i["instance_id"] for i in load_bundled()][:8]
KEYWORD = "discount"  # only wedgewatch__shopkit-0001's statement (the 6th instance) has it

HARNESS = """
import concurrent.futures, json, sys, time, openai
suite, out = sys.argv[1], sys.argv[2]
client = openai.OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
SYSTEM = "You are a careful software engineer. Answer with a unified diff and nothing else."
RULES = "Rules:\\nKeep the change minimal and do not touch the tests.\\nExplain nothing, only the patch."

def solve(inst):
    t0 = time.time()
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Fix this issue.\\n\\n{inst['problem_statement']}\\n\\n{RULES}"}]
    try:
        for _ in range(3):
            reply = client.chat.completions.create(model="sim-model", messages=messages, max_tokens=30)
            messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                         {"role": "user", "content": "Please continue until the patch is complete."}]
        row = {"instance_id": inst["instance_id"], "outcome": "resolved"}
    except openai.APIError as exc:
        row = {"instance_id": inst["instance_id"], "outcome": "error", "status": type(exc).__name__}
    row["duration"] = time.time() - t0
    return row

insts = [json.loads(line) for line in open(suite)]
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    rows = list(pool.map(solve, insts))
with open(out, "w") as fh:
    fh.writelines(json.dumps(r) + "\\n" for r in rows)
"""


def test_a_plain_sdk_script_is_attributed_by_fingerprints_alone(tmp_path: Path) -> None:
    by_id = {i["instance_id"]: i for i in load_bundled()}
    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(json.dumps(by_id[i]) + "\n" for i in IDS))
    (tmp_path / "harness.py").write_text(HARNESS)
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
    results = tmp_path / "results.jsonl"
    argv = [sys.executable, "-m", "wedgewatch", "wrap", str(cfg), "--"]
    argv += [sys.executable, str(tmp_path / "harness.py"), str(suite), str(results)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]

    statements = {iid: by_id[iid]["problem_statement"].strip() for iid in IDS}
    truth: Counter[str] = Counter()
    for line in (tmp_path / "faults.jsonl").read_text().splitlines():
        first = json.loads(line)["first_user"]
        truth.update(iid for iid, text in statements.items() if text in first)
    assert truth["wedgewatch__shopkit-0001"] == 1 and sum(truth.values()) >= 1

    ledger = str(tmp_path / "ledger.sqlite")
    argv = [sys.executable, "-m", "wedgewatch", "audit", str(results), "--ledger", ledger]
    argv += ["--suite", str(suite), "--json"]
    audit = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert audit.returncode == 0, audit.stderr
    result = json.loads(audit.stdout)
    (run,) = result["runs"]
    assert run["by"].get("tag", 0) == 0, "no request carried a tag"
    assert run["by"]["fingerprint"] == run["requests"], run["by"]
    assert run["infra_unattributed"] == [] and run["infra_ambiguous"] == []
    per = {i["instance_id"]: i for i in result["instances"]}
    for iid in IDS:
        assert per[iid]["stalls"] + per[iid]["upstream_errors"] == truth[iid], (iid, per[iid], truth)
        expected_requests = 3 if not truth[iid] else None
        if expected_requests is not None:
            assert per[iid]["requests"] == 3, f"{iid}: its 3 requests, and no other instance's"
    assert result["infra_failed"] == sorted(iid for iid in IDS if truth[iid])
    harness_rows = {
        json.loads(line)["instance_id"]: json.loads(line) for line in results.read_text().splitlines()
    }
    for iid in result["infra_failed"]:
        assert harness_rows[iid]["outcome"] == "error", "the harness scored it as a failure"
        assert per[iid]["verdict"].startswith("error")
    assert result["published"]["n"] == len(IDS)
    assert result["honest"]["n"] == len(IDS) - len(result["infra_failed"])
