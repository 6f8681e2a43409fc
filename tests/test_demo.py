"""`wedgewatch demo` end to end: the naive arm scores hangs as model failures, the guarded arm
catches them, restarts the server and reports infrastructure failures apart.

A scripted wedge (every server life wedges on its 12th generation request) makes both arms meet
the same fault deterministically, whatever order the four agents' requests arrive in."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

SCENARIO = """
name = "demo-test"
[server]
tokens_per_s = 50.0
[policy]
skill = 0.6
[[fault]]
when.nth = 12
action = "wedge"
after_tokens = 1
"""


def test_demo_naive_scores_hangs_as_model_failures_and_guarded_does_not(tmp_path: Path) -> None:
    scenario = tmp_path / "demo-test.toml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "demo"
    r = subprocess.run(
        [
            sys.executable, "-m", "wedgewatch", "demo", "--out", str(out), "--instances", "4",
            "--time-scale", "400", "--scenario", str(scenario), "--json",
        ],
        capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    figures = {f["arm"]: f for f in json.loads(r.stdout)}
    naive, guarded = figures["naive"], figures["guarded"]

    # The naive harness has one column: everything not resolved is the model's failure, hangs too.
    assert naive["hangs_scored_as_model_failures"] >= 1
    assert naive["scored_as_model_failures"] == naive["instances"] - naive["resolved"]
    assert naive["restarts"] == 0 and naive["stalls"] == 0  # no proxy, no supervision
    # A hung naive attempt waited out three client timeouts (1.5 s each at 400x).
    assert naive["longest_hang_seconds"] >= 3 * 600 / 400

    # The guarded arm caught the wedge, restarted, and never scored a hang against the model.
    assert guarded["hangs_scored_as_model_failures"] == 0
    assert guarded["stalls"] >= 1
    assert guarded["restarts"] >= 1
    assert guarded["scored_as_model_failures"] == guarded["unresolved"] + guarded["early_stop"]
    assert guarded["resolved"] >= naive["resolved"]

    # Both runs are in one ledger, with a results file per arm.
    assert (out / "ledger.sqlite").exists()
    for arm in ("naive", "guarded"):
        lines = (out / f"results-{arm}.jsonl").read_text().splitlines()
        assert len(lines) == 4
        assert {"instance_id", "outcome", "api_error", "early_stop", "attempts"} <= json.loads(
            lines[0]
        ).keys()

    # One HTML page with both arms side by side, self-contained.
    html = (out / "report.html").read_text()
    assert naive["run_id"] in html and guarded["run_id"] in html
    assert html.index(">naive ") < html.index(">guarded ")
    assert "<img" in html and "data:image/png;base64," in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)


def test_demo_never_removes_a_directory_it_did_not_make(tmp_path: Path) -> None:
    precious = tmp_path / "notes.txt"
    precious.write_text("mine")
    r = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "demo", "--out", str(tmp_path), "--instances", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--out" in lines[0]
    assert precious.read_text() == "mine"


def test_a_directory_an_earlier_demo_made_is_replaced(tmp_path: Path) -> None:
    from wedgewatch.demo import MARKER, prepare_out_dir

    out = tmp_path / "demo"
    prepare_out_dir(out)
    (out / "stale.jsonl").write_text("from the last demo")
    prepare_out_dir(out)
    assert (out / MARKER).is_file()
    assert not (out / "stale.jsonl").exists()
