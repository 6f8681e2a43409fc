"""``wedgewatch demo`` end to end, on the real simulator, proxy, supervisor, runner and sandboxes.

The default demo (two arms, seed 1, the ``story`` scenario) is run once as a user would run it;
scripted variants pin what a stochastic wedge cannot: the story's fix paying three 240 s attempts
for an instance that always hangs, and a guarded arm whose proxy is out of the way letting a hang
into the score. Counts are asserted as behaviours (at least one stall, a restart, ...), not exact
values, so that other deadline defaults do not break them."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import DefaultDemo
from wedgewatch.base.vocab import CLIENT_DISCONNECT, STALL_KINDS
from wedgewatch.demo.cells import KEYS
from wedgewatch.suites import load_bundled

FIRST = load_bundled()[0]
STALL_FIRST = f"""
name = "stall-first"
[policy]
skill = 0.6
[[fault]]
when.contains = "{str(FIRST["problem_statement"]).splitlines()[0]}"
action = "stall_ttft"
"""


def demo(out: Path, *args: str, timeout: float = 280) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "demo", "--out", str(out), "--json", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    # The demo checks its ledger's invariants at its end, in one line on stderr.
    assert "ledger check: ok" in r.stderr, r.stderr[-3000:]
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def arms(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["arm"]: a["runs"][0] for a in doc["arms"]}


# The tests that share the default demo (tests/conftest.py, with tests/test_quick_tour.py) run
# on one worker, so it runs once.
SHARES_THE_DEMO = pytest.mark.xdist_group("default-demo")


@pytest.mark.timeout(600)
@SHARES_THE_DEMO
def test_the_default_demo_shows_every_defence_against_the_same_wedge(default_demo: DefaultDemo) -> None:
    out, doc = default_demo.out, default_demo.doc
    assert [a["arm"] for a in doc["arms"]] == ["naive", "guarded"]
    assert doc["scenario"] == "story" and doc["seeds"] == [1]
    got = arms(doc)
    naive, guarded = got["naive"], got["guarded"]
    for run in got.values():
        assert set(KEYS) <= run.keys()
        assert run["true_resolved"] == naive["true_resolved"] > 0  # one model, one truth

    # The guarded arm met the wedge, caught it and restarted the server. The request that wedged
    # the simulator is always among its casualties (it wedges the engine mid-reply). Each went on
    # on the next life (the agent asks for one answer, not a stream: resumed whole), or was ended
    # by its deadline before the verdict and its attempt retried, or its client gave up while it
    # waited for the next life and its attempt was retried: at 200x the agent's deadline is 4.5 s
    # but a server's start is real seconds, slower than that on a busy machine. Which of the
    # three, and how many of each, is a race; that each is one of them and retried is not.
    with sqlite3.connect(out / "ledger.sqlite") as db:
        casualties = db.execute(
            "SELECT q.outcome, ae.status, (SELECT COUNT(*) FROM attempts b "
            "  WHERE b.run_id = a.run_id AND b.instance_id = a.instance_id AND b.attempt_id != a.attempt_id) "
            "FROM requests q JOIN attempts a ON a.attempt_id = q.attempt_id "
            "JOIN attempt_ends ae ON ae.attempt_id = a.attempt_id "
            "JOIN server_life_ends le ON le.life_id = q.life_id "
            "WHERE a.run_id = ? AND le.end_reason = 'wedge' AND q.outcome != 'ok'",
            (guarded["run_id"],),
        ).fetchall()
    assert casualties and guarded["restarts"] >= 1
    for outcome, status, others in casualties:
        if outcome != "resumed":  # its attempt failed: on the infrastructure's count, and retried
            assert outcome in (*STALL_KINDS, CLIENT_DISCONNECT) and status == "api_error" and others >= 1
    assert guarded["infra_failed"] == 0 and guarded["of_which_hangs"] == 0
    # ...so its published score is the model's true skill on every instance it finished.
    assert guarded["published_resolved"] == guarded["true_resolved_on_published"]

    # The naive arm hung, each hang three SDK timeouts long (600 s each in server time), and
    # scored the hangs as the model's failures: its score is below the model's skill.
    assert naive["of_which_hangs"] >= 1 and naive["hidden_by_hangs"] >= 1
    assert naive["published_resolved"] < naive["true_resolved"]
    assert naive["published_of"] == naive["instances"]
    # (The proxy times a request from when it reaches it, so a loaded machine shaves a little off.)
    assert 2.5 * 600 <= naive["hang_server_seconds_max"] < 3 * 600 + 90
    assert naive["restarts"] == 0 and naive["retried_attempts"] == 0
    # Its proxy only recorded: it ended nothing, even once the supervisor had found the wedge.
    assert naive["wedges"] >= 1 and naive["stalls"] == 0

    with sqlite3.connect(out / "ledger.sqlite") as db:
        # The naive count is the ledger's: instances whose only attempt ended api_error.
        (n,) = db.execute(
            "SELECT COUNT(*) FROM instance_outcomes WHERE run_id = ? AND n_api_error > 0",
            (naive["run_id"],),
        ).fetchone()
        # Every arm's requests are recorded (the naive arm's by a proxy with no deadlines).
        per_arm = dict(
            db.execute(
                "SELECT a.run_id, COUNT(*) FROM requests q JOIN attempts a ON a.attempt_id = q.attempt_id "
                "GROUP BY a.run_id"
            ).fetchall()
        )
    assert n == naive["of_which_hangs"]
    assert per_arm[naive["run_id"]] > 0 and per_arm[guarded["run_id"]] > 0

    # One HTML page with both arms side by side, self-contained.
    html = (out / "report.html").read_text()
    assert html.index(naive["run_id"]) < html.index(guarded["run_id"])
    assert "data:image/png;base64," in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)


@SHARES_THE_DEMO
def test_the_default_demo_table_is_printed_from_the_same_cells(default_demo: DefaultDemo) -> None:
    from wedgewatch.demo.table import table_rows

    doc = default_demo.doc
    rows = {r[0].strip(): r[1:] for r in table_rows(doc["arms"])}
    naive, guarded = arms(doc)["naive"], arms(doc)["guarded"]
    assert rows["published score"] == (
        f"{naive['published_resolved']} / {naive['published_of']}",
        f"{guarded['published_resolved']} / {guarded['published_of']}",
    )
    assert rows["of which were hangs"] == (str(naive["of_which_hangs"]), "0")
    assert rows["hangs at real speed (server s)"][0] == (
        f"{naive['hung_attempts']} x {naive['hang_server_seconds_each']:,.1f} s"
    )


@pytest.mark.timeout(300)
def test_an_instance_that_always_hangs_costs_the_story_fix_three_240_s_attempts(tmp_path: Path) -> None:
    scenario = tmp_path / "stall-first.toml"
    scenario.write_text(STALL_FIRST)
    out = tmp_path / "demo"
    doc = demo(out, "--arms", "story-fix", "--instances", "1", "--scenario", str(scenario))
    run = arms(doc)["story-fix"]
    assert run["infra_failed"] == 1 and run["of_which_hangs"] == 1  # scored against the model
    assert run["hung_attempts"] == 3 and run["restarts"] == 1  # restarted after two API errors
    with sqlite3.connect(out / "ledger.sqlite") as db:
        rows = db.execute(
            "SELECT a.attempt_no, q.outcome, q.duration, q.detail_json FROM requests q "
            "JOIN attempts a ON a.attempt_id = q.attempt_id WHERE a.run_id = ? ORDER BY a.attempt_no",
            (run["run_id"],),
        ).fetchall()
    # The client's 240 s run from its send; the proxy's row counts from when a ready life took the
    # request, so a request that waited for one (after the restart) adds that wait back.
    longest: dict[int, float] = {}
    for attempt_no, _, duration, detail in rows:
        waited = json.loads(detail or "{}").get("waited_for_life", 0.0)
        longest[attempt_no] = max(longest.get(attempt_no, 0.0), (duration + waited) * doc["time_scale"])
    waits = [longest[n] for n in sorted(longest)]
    # Each attempt hangs until the client's own 240 s deadline ends it (the client leaves: no
    # deadline of the proxy's cut it short), 240 s less 10% at least (the client's timer runs in
    # real time at the time scale). No upper bound: at 200x, a tenth of a second a loaded machine
    # takes to notice the client leaving reads as 20 s. In all, three of them at least (the
    # story's 721-727 s).
    assert {outcome for _, outcome, _, _ in rows} == {"client_disconnect"}, rows
    assert len(waits) == 3 and all(w >= 216 for w in waits), waits
    assert run["hang_server_seconds"] >= 3 * 216


# An agent that swallows API errors and "submits" anyway, as many harnesses' agents do. Its own
# client gives up after 3 s: after the proxy's scaled 1 s deadline, before the supervisor's
# 10 s wedge window.
FORGIVING = """
import os, sys, openai
try:
    openai.OpenAI(base_url=sys.argv[1], api_key=os.environ["OPENAI_API_KEY"], timeout=3.0,
                  max_retries=0).chat.completions.create(
        model=sys.argv[2], max_tokens=5,
        messages=[{"role": "user", "content": open(sys.argv[3]).read()}])
except Exception as exc:
    print("swallowed", type(exc).__name__)
"""


@pytest.mark.long
@pytest.mark.timeout(400)
def test_with_the_proxy_out_of_the_way_a_hang_reaches_the_guarded_score(tmp_path: Path) -> None:
    scenario = tmp_path / "stall-first.toml"
    scenario.write_text(STALL_FIRST)
    agent = tmp_path / "forgiving.py"
    agent.write_text(FORGIVING)
    common = [
        "--arms", "guarded", "--instances", "1", "--scenario", str(scenario),
        "--set", "guarded:agent.name=command",
        "--set", f'guarded:agent.command=["{sys.executable}", "{agent}", "{{base_url}}", "{{model}}", "{{problem_file}}"]',
        "--set", "guarded:server.wedge_window=2000",
        "--set", "guarded:run.evaluate=false",
        "--set", "guarded:run.attempts=1",  # one is enough to see it, and keeps the test short
    ]  # fmt: skip
    with_proxy = arms(demo(tmp_path / "on", *common))["guarded"]
    # The proxy ended the hang and its record made the attempt api_error, whatever the agent said:
    # infra_failed, reported apart (with more attempts it would be retried).
    assert with_proxy["stalls"] >= 1 and with_proxy["infra_failed"] == 1
    assert with_proxy["of_which_hangs"] == 0 and with_proxy["scored_as_model_failures"] == 0

    # The same harness with the proxy only recording (no deadline, no verdict): the agent's
    # swallowed timeout is a submission, and the hang is scored as the model's failure.
    without = arms(demo(tmp_path / "off", *common, "--set", "guarded:watchdog.record_only=true"))["guarded"]
    assert without["stalls"] == 0
    assert without["of_which_hangs"] == 1 and without["scored_as_model_failures"] == 1
    assert without["published_resolved"] == 0 and without["hidden_by_hangs"] == int(
        without["true_resolved"] == 1
    )


def test_bad_demo_input_is_one_line(tmp_path: Path) -> None:
    for args, flag in (
        (["--arms", "naive,clever"], "--arms"),
        (["--set", "guarded=watchdog"], "--set"),
        (["--scenario", "no-such-scenario"], "no-such-scenario"),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "wedgewatch", "demo", "--out", str(tmp_path / "d"), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and flag in lines[0], r.stderr


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


def test_a_directory_an_earlier_demo_made_keeps_its_ledger(tmp_path: Path) -> None:
    from wedgewatch.demo import MARKER, prepare_out_dir

    out = tmp_path / "demo"
    prepare_out_dir(out)
    (out / "ledger.sqlite").write_text("the earlier demo's runs")
    for derived in ("results-naive-s7.jsonl", "summary.json", "report.html"):
        (out / derived).write_text("from the last demo")
    prepare_out_dir(out)
    assert (out / MARKER).is_file()
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "ledger.sqlite"]
    assert (out / "ledger.sqlite").read_text() == "the earlier demo's runs"


def test_a_second_demo_names_the_runs_it_keeps_tells_each_arm_and_prints_ids_to_paste(tmp_path: Path) -> None:
    from ledger_helpers import make_run
    from wedgewatch.demo import prepare_out_dir
    from wedgewatch.ledger import Ledger, queries

    out = tmp_path / "wedgewatch-demo"
    prepare_out_dir(out)  # an earlier demo's directory, its run written by hand
    with Ledger(out / "ledger.sqlite") as ledger:
        make_run(ledger, "demo-naive-s1-earlier", [FIRST["instance_id"]])
    (out / "results-naive-s7.jsonl").write_text("a file of the earlier demo")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "wedgewatch",
            "demo",
            "--out",
            str(out),
            "--instances",
            "1",
            "--arms",
            "guarded",
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    said = r.stderr.splitlines()
    (kept,) = [line for line in said if "holds an earlier demo" in line]
    assert "demo-naive-s1-earlier" in kept and f"they stay in {out / 'ledger.sqlite'}" in kept
    # One line as the arm starts, naming its run, and one as it ends.
    (began,) = [line for line in said if line.startswith("guarded, seed 1 (1 of 1): run ")]
    run_id = began.split()[-1]
    assert any(line.startswith("guarded, seed 1: done in ") and "published 1/1" in line for line in said)
    with Ledger(out / "ledger.sqlite", read_only=True) as ledger:
        assert queries.run_ids(ledger) == ["demo-naive-s1-earlier", run_id]
    assert not (out / "results-naive-s7.jsonl").exists() and (out / "results-guarded-s1.jsonl").exists()
    # The closing hint is a command to paste, with a real run id.
    (hint,) = [line for line in r.stdout.splitlines() if line.startswith("look closer: ")]
    command = hint.removeprefix("look closer: ")
    assert command == f"wedgewatch report --ledger {out / 'ledger.sqlite'} {run_id}"
    pasted = subprocess.run(
        [sys.executable, "-m", *command.split()], capture_output=True, text=True, timeout=120
    )
    assert pasted.returncode == 0 and run_id in pasted.stdout, pasted.stderr
