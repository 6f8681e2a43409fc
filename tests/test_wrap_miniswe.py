"""End to end: the real mini-swe-agent, in its own batch mode (``mini-extra swebench``, 4 worker
threads, ``local`` environment) over a suite file, under ``wedgewatch wrap``, against the
simulator (``--policy swe`` plays the model) with a scenario that wedges the server mid-run.
The simulator's own fault log is the ground truth: ``audit`` must attribute every request it
struck to the instance that sent it, mark exactly those instances infra_failed, and a second
``wrap`` with ``{rerun}`` must run only them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from wedgewatch.suites import load_bundled

MINI = str(Path(sys.executable).with_name("mini-extra"))
# The wedge: the first request whose last user message holds this word, which only
# wedgewatch__shopkit-0001's problem statement has; it is the suite's 5th instance, so with 4
# workers it starts once the first instance is done: mid-run.
KEYWORD = "discount"
IDS = [f"wedgewatch__datekit-000{n}" for n in range(1, 5)] + [
    "wedgewatch__shopkit-0001",
    "wedgewatch__shopkit-0002",
]


def setup(tmp_path: Path, wedge: bool) -> Path:
    by_id = {i["instance_id"]: i for i in load_bundled()}
    suite = tmp_path / "suite"
    suite.mkdir(exist_ok=True)
    with (suite / "test.jsonl").open("w") as fh:
        for iid in IDS:
            fh.write(
                json.dumps({k: by_id[iid][k] for k in ("instance_id", "problem_statement", "repo")}) + "\n"
            )
    scenario = tmp_path / ("wedge.toml" if wedge else "healthy.toml")
    fault = f'[[fault]]\nwhen.contains = "{KEYWORD}"\ntimes = 1\naction = "wedge"\nafter_tokens = 2\n'
    scenario.write_text(fault if wedge else 'name = "healthy"\n')
    (tmp_path / "work").mkdir(exist_ok=True)
    cfg = tmp_path / ("wedge-run.toml" if wedge else "healthy-run.toml")
    cfg.write_text(
        f"""
[server]
scenario = "{scenario}"
time_scale = 50
args = ["--policy", "swe", "--fault-log", "{tmp_path / "faults.jsonl"}"]
log_dir = "{tmp_path / "logs"}"
scrape_interval = 0.25
wedge_window = 2.0
canary_timeout = 1.0
restart_backoff = 0.1

[watchdog]
ttft_timeout = 5
stall_timeout = 2
# The old behaviour: the wedge fails its requests, so the rerun of what it broke is tested
# (resumed instead, tests/test_wrap_agents.py, nothing is lost to rerun).
on_wedge = "fail"

[run]
ledger = "{tmp_path / "ledger.sqlite"}"
"""
    )
    return cfg


def run_wrapped(tmp_path: Path, cfg: Path, out: str, *extra: str, rerun: Path | None = None) -> None:
    env = {
        **os.environ,
        "MSWEA_SILENT_STARTUP": "1",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        # mini retries a failed model call 10 times by default; once is the harness's own choice
        # here, so that a wedge costs the instance it hits (the case audit is for).
        "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
        # The model's commands run for real in one shared, empty directory and mostly fail;
        # `python` is this venv's, not a slow pyenv shim.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    argv = [sys.executable, "-m", "wedgewatch", "wrap", str(cfg)]
    argv += ["--rerun", str(rerun)] if rerun is not None else []
    argv += ["--", MINI, "swebench", "--subset", str(tmp_path / "suite"), "--split", "test"]
    argv += ["-o", str(tmp_path / out), "-w", "4", "-m", "openai/sim-model", "--environment-class", "local"]
    argv += ["-c", "swebench.yaml", "-c", f"environment.cwd={tmp_path / 'work'}", "-c", "agent.cost_limit=0"]
    argv += ["-c", "environment.timeout=3"]  # a command that hangs costs 3 s, not mini's 60
    # swebench.yaml sets BASH_ENV=/root/.bashrc for its containers; with the local environment
    # that is this host's .bashrc, whose `eval "$(pyenv init -)"` re-enters itself through
    # BASH_ENV in every bash pyenv starts: an unbounded fork tree (seen here: 15,000 processes).
    argv += ["-c", "environment.env.BASH_ENV=/dev/null"]
    argv += list(extra)
    with (tmp_path / f"{out}.log").open("w") as log:
        done = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, (tmp_path / f"{out}.log").read_text()[-3000:]


def audit(tmp_path: Path, *results: str, rerun_out: Path | None = None) -> dict[str, Any]:
    argv = [sys.executable, "-m", "wedgewatch", "audit", *(str(tmp_path / r) for r in results)]
    argv += ["--ledger", str(tmp_path / "ledger.sqlite"), "--suite", str(tmp_path / "suite"), "--json"]
    argv += ["--rerun-out", str(rerun_out)] if rerun_out is not None else []
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def struck_by_instance(tmp_path: Path) -> Counter[str]:
    """The simulator's record: how many harness requests of each instance it struck (warm-ups
    and canaries, which hold no problem statement, are not the harness's)."""
    statements = {
        i["instance_id"]: i["problem_statement"].strip() for i in load_bundled() if i["instance_id"] in IDS
    }
    counts: Counter[str] = Counter()
    for line in (tmp_path / "faults.jsonl").read_text().splitlines():
        rec = json.loads(line)
        owners = [iid for iid, text in statements.items() if text in rec["first_user"]]
        assert len(owners) <= 1
        counts.update(owners)
    return counts


@pytest.mark.long
def test_mini_swe_agent_batch_under_wrap_is_audited_against_the_simulators_record(tmp_path: Path) -> None:
    run_wrapped(tmp_path, setup(tmp_path, wedge=True), "out1")
    truth = struck_by_instance(tmp_path)
    assert truth["wedgewatch__shopkit-0001"] >= 1, "the wedge struck its instance"
    rerun = tmp_path / "rerun.txt"
    first = audit(tmp_path, "out1", rerun_out=rerun)
    (run,) = first["runs"]
    assert run["infra_unattributed"] == [] and run["infra_ambiguous"] == []
    per = {i["instance_id"]: i for i in first["instances"]}
    for iid in IDS:
        hit = per[iid]["stalls"] + per[iid]["upstream_errors"]
        assert hit == truth[iid], (
            f"{iid}: audit found {hit} failed requests, the simulator struck {truth[iid]}"
        )
        assert (per[iid]["outcome"] == "infra_failed") == (truth[iid] > 0), per[iid]
        assert per[iid]["requests"] > 0
    infra = sorted(iid for iid in IDS if truth[iid])
    assert first["infra_failed"] == infra
    assert first["honest"]["n"] == len(IDS) - len(infra) and first["published"]["n"] == len(IDS)
    (pattern,) = rerun.read_text().splitlines()  # mini-swe-agent's --filter: one regex
    assert [iid for iid in IDS if re.match(pattern, iid)] == infra

    run_wrapped(tmp_path, setup(tmp_path, wedge=False), "out2", "--filter", "{rerun}", rerun=rerun)
    rerun_dirs = sorted(p.name for p in (tmp_path / "out2").iterdir() if p.is_dir())
    assert rerun_dirs == infra, "the second wrap ran only the infra-failed instances"
    both = audit(tmp_path, "out1", "out2")
    assert both["infra_failed"] == []
    final = {i["instance_id"]: i for i in both["instances"]}
    assert len({i["harness_run"] for i in both["instances"]}) == 2
    for iid in infra:
        assert final[iid]["outcome"] != "infra_failed" and [r["outcome"] for r in final[iid]["runs"]] == [
            "infra_failed",
            final[iid]["outcome"],
        ]
