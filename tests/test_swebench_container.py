"""The real SWE-bench path end to end: instance rows in the official dataset schema, one container
per attempt from each instance's own image (SWE-bench-layout images built from local files), the
simulator playing the model through the proxy, and grading with the ``swebench`` library's test
specification and grading functions; its verdicts are held against the local evaluation's on the
same patches. A missing image fails its instance as ``harness_error`` naming the image."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandbox_helpers import PODMAN_ARGS, require_tools
from wedgewatch.base.errors import BadInput, SuiteError
from wedgewatch.config import Config, SuiteConfig, load_config
from wedgewatch.ledger import Ledger
from wedgewatch.runner import entry as runner_main
from wedgewatch.runner.evaluate import evaluate
from wedgewatch.runner.execution import check_repositories
from wedgewatch.sandbox import LocalSandbox
from wedgewatch.sandbox.images import image_for
from wedgewatch.sandbox.testbed import swebench_row
from wedgewatch.suites import load_bundled
from wedgewatch.suites.load import load_suite

pytestmark = pytest.mark.timeout(300)

BUNDLED = load_bundled()
SOLVED, WANDERS, WRONG = 0, 1, 2  # the swe policy at seed 2, skill 0.5: solve, step limit, wrong patch
MISSING = "localhost/wedgewatch-missing:never-built"
# The columns of princeton-nlp/SWE-bench_Verified, in its order.
VERIFIED = [
    "repo",
    "instance_id",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
    "difficulty",
]


def verified_row(n: int, image: str) -> dict[str, Any]:
    """Bundled instance ``n`` as a Verified row, plus the columns swebench >= 5 grades from."""
    row = swebench_row(BUNDLED[n], image)
    row["difficulty"] = "<15 min fix"
    assert set(VERIFIED) <= set(row)
    return {k: row[k] for k in [*VERIFIED, "image_name", "eval_script", "log_parser", "eval_type"]}


def test_verified_rows_load_from_jsonl_and_parquet_and_name_swebench_images(tmp_path: Path) -> None:
    import pyarrow as pa  # a dependency of `datasets`, in the lock
    import pyarrow.parquet as pq

    row = {k: v for k, v in verified_row(SOLVED, "x").items() if k in VERIFIED}
    row["instance_id"] = "django__django-11099"
    jsonl = tmp_path / "verified.jsonl"
    jsonl.write_text(json.dumps(row) + "\n")
    parquet = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist([row]), parquet)
    for path in (jsonl, parquet):
        suite = load_suite(SuiteConfig(path=str(path)))
        (inst,) = suite.instances
        assert inst["FAIL_TO_PASS"] == json.loads(row["FAIL_TO_PASS"])  # JSON strings become lists
        assert image_for(inst) == "docker.io/swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
        assert image_for({**inst, "image_name": "mine:1"}) == "mine:1"
        assert image_for(inst, "local/{instance_id}:t") == "local/django_1776_django-11099:t"


def test_a_container_run_needs_no_mirror_and_no_host_work_tree(tmp_path: Path) -> None:
    row = {k: v for k, v in verified_row(SOLVED, "x").items() if k in VERIFIED}
    row["instance_id"], row["repo"] = "django__django-11099", "django/django"
    path = tmp_path / "verified.jsonl"
    path.write_text(json.dumps(row) + "\n")
    suite = load_suite(SuiteConfig(path=str(path)))
    with pytest.raises(SuiteError, match="django__django-11099"):
        check_repositories(Config(), suite)  # local: no mirror, not bundled
    in_podman = {"kind": "container", "container_cli": "podman"}
    check_repositories(Config.model_validate({"sandbox": in_podman}), suite)
    with pytest.raises(BadInput, match="`no-such-cli` is not installed"):
        check_repositories(
            Config.model_validate({"sandbox": {**in_podman, "container_cli": "no-such-cli"}}), suite
        )
    command_in_container = {"sandbox": in_podman, "agent": {"name": "command"}}
    with pytest.raises(BadInput, match="runs its program on the host"):
        check_repositories(Config.model_validate(command_in_container), suite)


def write_config(tmp_path: Path, suite: Path) -> Path:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text("[policy]\nskill = 0.5\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f"""
[server]
profile = "sim"
scenario = "{scenario}"
args = ["--policy", "swe"]
scrape_interval = 0.2
log_dir = "{tmp_path / "logs"}"
[server.warmup]
count = 1
[agent]
step_limit = 8
[suite]
path = "{suite}"
[run]
concurrency = 2
attempts = 2
ledger = "{tmp_path / "c.sqlite"}"
workdir = "{tmp_path / "work"}"
time_scale = 20.0
seed = 2
[sandbox]
kind = "container"
container_cli = "podman"
container_args = {json.dumps(PODMAN_ARGS)}
"""
    )
    return cfg


@pytest.mark.long
def test_a_container_run_graded_by_swebench_agrees_with_the_local_evaluation(
    tmp_path: Path, testbed_images: Callable[[int], str]
) -> None:
    require_tools("podman", "runc")
    rows = [verified_row(SOLVED, testbed_images(SOLVED)), verified_row(WRONG, testbed_images(WRONG))]
    rows.append(verified_row(WANDERS, MISSING))
    suite = tmp_path / "verified.jsonl"
    suite.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(write_config(tmp_path, suite))
    ex = runner_main.start(cfg, run_id="sweb")
    assert ex.end_mark == "finished"  # the missing image failed its instance, not the run
    with Ledger(cfg.run.ledger) as lg:
        ends = lg.query(
            "SELECT a.instance_id, e.status, e.patch, e.detail_json FROM attempts a "
            "JOIN attempt_ends e USING (attempt_id) WHERE a.run_id = 'sweb' ORDER BY a.attempt_no"
        )
        evals = lg.query(
            "SELECT a.instance_id, v.resolved, v.source, v.detail_json FROM evaluations v "
            "JOIN attempts a USING (attempt_id) WHERE a.run_id = 'sweb'"
        )
    missing = [r for r in ends if r["instance_id"] == BUNDLED[WANDERS]["instance_id"]]
    assert [r["status"] for r in missing] == ["harness_error", "harness_error"]
    assert all(MISSING in json.loads(r["detail_json"])["error"] for r in missing)
    graded = {r["instance_id"]: r for r in evals}
    assert set(graded) == {BUNDLED[SOLVED]["instance_id"], BUNDLED[WRONG]["instance_id"]}
    patches = {r["instance_id"]: r["patch"] for r in ends if r["status"] == "submitted"}
    for n, expected in ((SOLVED, 1), (WRONG, 0)):
        iid = BUNDLED[n]["instance_id"]
        row = graded[iid]
        detail = json.loads(row["detail_json"])
        assert (row["source"], row["resolved"]) == ("swebench", expected), detail
        local_box = LocalSandbox.create(BUNDLED[n], tmp_path / "local")
        try:
            local = evaluate(dict(BUNDLED[n]), patches[iid], local_box, 120)
        finally:
            local_box.close()
        assert local.resolved == row["resolved"]
        # Test by test: what the library graded in the container is what pytest said locally.
        assert {t: s == "PASSED" for t, s in detail["tests"].items()} == {
            t: s == "PASSED" for t, s in local.tests.items()
        }
    assert any(
        s != "PASSED"
        for s in json.loads(graded[BUNDLED[WRONG]["instance_id"]]["detail_json"])["tests"].values()
    )


def test_mini_swe_agent_solves_an_instance_inside_its_container(
    start_sim: Callable[..., Any], testbed_images: Callable[[int], str], tmp_path: Path
) -> None:
    from sandbox_helpers import make, settings
    from wedgewatch.agents.miniswe import MiniSweAgent
    from wedgewatch.base.protocols import AgentTask
    from wedgewatch.config import AgentConfig
    from wedgewatch.sim.swe_policy import behaviour

    n = next(i for i, inst in enumerate(BUNDLED) if behaviour(inst["instance_id"], 0, 1.0) == "solve")
    sim = start_sim("--policy", "swe", "--time-scale", "50")
    box = make("container", BUNDLED[n], tmp_path / "box", settings("container", testbed_images(n)))
    task = AgentTask(
        "att", BUNDLED[n], box, f"{sim.url}/v1", "sim-model", trajectory_path=tmp_path / "t.json"
    )
    try:
        assert str(box.path) == "/testbed"  # what mini is told to work in: the image's directory
        result = MiniSweAgent(AgentConfig(name="mini-swe-agent")).run(task)
    finally:
        box.close()
    assert (result.status, result.extra["patch_source"]) == ("submitted", "sandbox")
    local_box = LocalSandbox.create(BUNDLED[n], tmp_path / "local")
    try:
        assert evaluate(dict(BUNDLED[n]), result.patch, local_box, 120).resolved == 1
    finally:
        local_box.close()
