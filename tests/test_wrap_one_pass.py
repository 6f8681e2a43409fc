"""End to end, the wrapped path in one pass: a harness (the OpenAI SDK, one instance after another,
each request tagged with its instance, a failed request sent again as harnesses do) under
``wedgewatch wrap`` against the simulator, which wedges once. Then, by the id wrap printed:
``report``, ``lives`` and ``export`` read the run, and ``audit`` of the harness's results lists
no instance to rerun: the one the wedge struck was sent again with success (``recovered``) or
resumed across the restart. wrap's own lines say when the new life was ready and, at the end,
what the ledger holds."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wedgewatch.base import vocab
from wedgewatch.ledger import Ledger, queries

TAGS = ["i-1", "i-2", "i-3", "i-4"]

HARNESS = """
import json, sys, time, openai
out = sys.argv[1]
client = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL from wrap; the retries are this loop's
rows = []
for tag in %(tags)r:
    messages = [{"role": "system", "content": "You fix small bugs, one patch at a time."},
                {"role": "user", "content": f"Task {tag}: make the tests of {tag} pass."}]
    row = {"instance_id": tag, "outcome": "resolved"}
    for turn in range(2):
        for attempt in range(4):  # a harness's own retry: the same request, sent again
            try:
                reply = client.chat.completions.create(
                    model="sim-model", messages=messages, max_tokens=8, stream=True,
                    extra_headers={"x-wedgewatch-tag": tag},
                )
                text = "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
                break
            except openai.APIError as exc:
                row = {"instance_id": tag, "outcome": "error", "status": type(exc).__name__}
                time.sleep(2)
        else:
            break
        row = {"instance_id": tag, "outcome": "resolved"}
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Go on."}]
    rows.append(row)
with open(out, "w") as fh:
    fh.writelines(json.dumps(r) + "\\n" for r in rows)
"""


def wedgewatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", *args], capture_output=True, text=True, timeout=120
    )


# The proxy's stall deadline against the supervisor's wedge verdict (its window 1.5 s, a scrape each
# 0.25 s): at 1.5 s the request in flight usually fails first and the harness sends it again (or
# the verdict wins and it is resumed: a race, so either is accepted); at 10 s the verdict always
# comes first and the request is resumed on the next life, the harness none the wiser.
@pytest.mark.parametrize("stall_timeout", [1.5, 10.0], ids=["stall-first", "verdict-first"])
def test_a_wrapped_run_with_one_wedge_is_read_by_its_id_and_audited_in_one_pass(
    tmp_path: Path, stall_timeout: float
) -> None:
    (tmp_path / "harness.py").write_text(HARNESS % {"tags": TAGS})
    # The 7th generation request of a server process wedges it: on the first life that is one of
    # the harness's last requests (the readiness canary is the first; no warm-up), and the next
    # life never gets that far, so the request sent again after the restart is answered.
    (tmp_path / "wedge.toml").write_text('[[fault]]\nwhen.nth = 7\naction = "wedge"\nafter_tokens = 2\n')
    ledger_path = tmp_path / "ledger.sqlite"
    (tmp_path / "run.toml").write_text(
        f"""
[server]
scenario = "{tmp_path / "wedge.toml"}"
time_scale = 20
log_dir = "{tmp_path / "logs"}"
scrape_interval = 0.25
wedge_window = 1.5
canary_timeout = 1.0
restart_backoff = 0.1

[server.warmup]
count = 0

[watchdog]
ttft_timeout = 10
stall_timeout = {stall_timeout}

[run]
ledger = "{ledger_path}"
"""
    )
    results = tmp_path / "results.jsonl"
    harness = [sys.executable, str(tmp_path / "harness.py"), str(results)]
    done = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "wrap", str(tmp_path / "run.toml"), "--", *harness],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    hid = re.search(r"harness run (wrap-\d{8}-\d{6}-[0-9a-f]{4}), base URL", done.stderr)
    assert hid is not None, done.stderr
    run_id = hid.group(1)

    with Ledger(ledger_path, read_only=True) as lg:
        rows = [dict(r) for r in queries.harness_requests(lg, run_id)]
        lives = [dict(r) for r in queries.server_lives(lg, run_id)]
    assert [lv["end_reason"] for lv in lives] == [vocab.WEDGE, vocab.STOP], "one wedge, one restart"
    failed = [r for r in rows if vocab.is_infra_outcome(str(r["outcome"]))]
    resumed = [r for r in rows if r["outcome"] == vocab.RESUMED]
    assert failed or resumed, "the wedge struck a request of the harness"
    struck = {r["attempt_id"] for r in failed + resumed}
    assert len(struck) == 1 and struck <= set(TAGS), struck
    if stall_timeout > 5:
        assert len(resumed) == 1 and failed == [], "the verdict came first: resumed, nothing failed"

    # wrap's lines: the new life, once ready, and the last line, counted from the ledger.
    ready = [line for line in done.stderr.splitlines() if " ready (" in line]
    assert len(ready) == 1 and f"ready ({lives[1]['life_id']}), replacing life 1 after a wedge" in ready[0]
    stalls = sum(1 for r in rows if r["outcome"] in vocab.STALL_KINDS)
    last = f"wedgewatch wrap: harness run {run_id}: {len(rows)} requests ({len(failed)} failed"
    (end,) = [line for line in done.stderr.splitlines() if line.startswith(last)]
    plural = "" if stalls == 1 else "s"
    assert f", {stalls} stall{plural}, {len(resumed)} resumed, 1 restart (wedge 1)" in end

    report = wedgewatch("report", run_id, "--ledger", str(ledger_path), "--json")
    assert report.returncode == 0, report.stderr
    s: dict[str, Any] = json.loads(report.stdout)
    assert s["requests"]["total"] == len(rows) and s["requests"][vocab.RESUMED] == len(resumed)
    assert s["server"]["restarts"] == 1 and s["server"]["wedges"] >= 1
    assert [lv["life_id"] for lv in s["lives"]] == [lv["life_id"] for lv in lives]
    tags = {t["tag"]: t for t in s["tags"]}
    assert sorted(tags) == TAGS and all(t["requests"] >= 2 for t in tags.values())
    assert s["by_infra"][vocab.INFRA_FAILED] == 0, "no instance lost to the wedge"
    if failed:  # failed, then sent again with success
        assert tags[struck.pop()]["infra"] == vocab.RECOVERED

    lives_out = wedgewatch("lives", run_id, "--ledger", str(ledger_path), "--json")
    assert lives_out.returncode == 0, lives_out.stderr
    survival = json.loads(lives_out.stdout)["survival"]
    assert (survival["axis"], survival["lives"], survival["failed"]) == ("requests", 2, 1)

    export = wedgewatch("export", run_id, "--ledger", str(ledger_path), "--format", "csv")
    assert export.returncode == 0, export.stderr
    exported = list(csv.DictReader(io.StringIO(export.stdout)))
    assert [r["instance_id"] for r in exported] == TAGS
    assert vocab.INFRA_FAILED not in {r["infra"] for r in exported}

    rerun = tmp_path / "rerun.txt"
    audit = wedgewatch(
        "audit", str(results), "--ledger", str(ledger_path), "--json", "--rerun-out", str(rerun)
    )
    assert audit.returncode == 0, audit.stderr
    result = json.loads(audit.stdout)
    assert result[vocab.INFRA_FAILED] == [] and rerun.read_text() == "", "nothing to rerun"
    assert result["published"] == result["honest"] and result["honest"]["k"] == len(TAGS)
    assert result[vocab.RECOVERED] == ([r["attempt_id"] for r in failed[:1]] if failed else [])
