"""Runner parts that need no server: the retry decision, the effective config, and local
evaluation in a real sandbox of a bundled instance."""

from __future__ import annotations

from pathlib import Path

import pytest

from wedgewatch.base import errors
from wedgewatch.base.errors import EvaluationError
from wedgewatch.base.protocols import AgentResult
from wedgewatch.base.vocab import is_infra_outcome
from wedgewatch.config import Config, effective
from wedgewatch.runner.evaluate import evaluate
from wedgewatch.runner.execution import check_run_id
from wedgewatch.runner.retry import decide
from wedgewatch.sandbox import LocalSandbox
from wedgewatch.suites import bundled_extras, load_bundled
from wedgewatch.suites.testrun import node_ids


def test_proxy_records_overrule_what_the_agent_said() -> None:
    ok = AgentResult(status="submitted", patch="x")
    assert decide(ok, None, ["ok", "ok"], is_infra_outcome) == ("submitted", "")
    # a stall the agent swallowed still makes the attempt an api_error
    assert decide(ok, None, ["ok", "stall_midstream", "ok"], is_infra_outcome) == (
        "api_error",
        "stall_midstream",
    )
    assert decide(None, errors.AgentCrash("x"), ["upstream_http_503"], is_infra_outcome) == (
        "api_error",
        "upstream_http_503",
    )
    # a 4xx is the client's business, not the server's
    early = AgentResult(status="early_stop", reason="context_window")
    assert decide(early, None, ["client_error"], is_infra_outcome) == ("early_stop", "context_window")


def test_exceptions_map_by_class() -> None:
    assert decide(None, errors.UpstreamStalled("s", reason="stall_ttft"), [], is_infra_outcome) == (
        "api_error",
        "stall_ttft",
    )
    assert decide(None, errors.SandboxError("no repo"), [], is_infra_outcome) == ("harness_error", "sandbox")
    assert decide(None, errors.EarlyStop("step_limit"), [], is_infra_outcome) == ("early_stop", "step_limit")
    assert decide(None, KeyError("x"), [], is_infra_outcome) == ("harness_error", "crash:KeyError")
    assert decide(AgentResult(status="weird"), None, [], is_infra_outcome)[0] == "harness_error"


def test_effective_config_scales_simulated_time_and_seeds_the_simulator() -> None:
    cfg = Config.model_validate(
        {"run": {"time_scale": 10.0, "seed": 7}, "server": {"args": ["--policy", "swe"]}}
    )
    eff = effective(cfg)
    assert eff.server.time_scale == 10.0
    assert eff.watchdog.stall_timeout == pytest.approx(2.0)
    assert eff.watchdog.total_timeout == pytest.approx(24.0)
    assert eff.watchdog.min_rate == pytest.approx(5.0)
    assert eff.server.args == ["--policy", "swe", "--seed", "7"]
    # The supervisor's windows and the client's deadline shrink too, never below a second.
    assert eff.server.wedge_window == pytest.approx(6.0)
    assert eff.server.canary_timeout == pytest.approx(1.0)
    # The heartbeat rule (the default) judges by its own window: scrapes four times within it.
    assert eff.server.detection == "heartbeat" and eff.server.heartbeat_window == pytest.approx(1.0)
    assert eff.server.scrape_interval == pytest.approx(0.25)
    assert eff.watchdog.engine_stall_timeout == pytest.approx(1.0)
    assert eff.agent.client_timeout == pytest.approx(90.0)
    fast = effective(Config.model_validate({"run": {"time_scale": 1000.0}}))
    assert fast.watchdog.stall_timeout == pytest.approx(1.0)
    assert fast.server.scrape_interval == pytest.approx(0.25)
    assert (
        cfg.watchdog.stall_timeout == 20.0
    )  # the config as written is untouched (it is what the ledger keeps)
    real = Config.model_validate({"server": {"profile": "vllm", "model": "m"}, "run": {"time_scale": 1.0}})
    assert effective(real).server.args == []


def test_run_ids_must_be_safe_in_urls() -> None:
    assert check_run_id("run-1.a_b") == "run-1.a_b"
    for bad in ("a/b", "", "x y", "-lead"):
        with pytest.raises(errors.BadInput, match="--run-id"):
            check_run_id(bad)


@pytest.fixture
def instance() -> dict[str, object]:
    return load_bundled()[0]


def _box(instance: dict[str, object], tmp_path: Path, name: str) -> LocalSandbox:
    return LocalSandbox.create(instance, tmp_path / name)


def test_gold_patch_resolves_and_wrong_patch_does_not(instance: dict[str, object], tmp_path: Path) -> None:
    gold = evaluate(instance, str(instance["patch"]), _box(instance, tmp_path, "a"), timeout=120)
    assert (gold.resolved, gold.verdict) == (1, "resolved")
    assert set(gold.tests.values()) == {"PASSED"}
    wrong = bundled_extras(instance).wrong_patch
    bad = evaluate(instance, wrong, _box(instance, tmp_path, "b"), timeout=120)
    assert (bad.resolved, bad.verdict) == (0, "unresolved")
    assert "FAILED" in bad.tests.values() or "MISSING" in bad.tests.values()
    nothing = evaluate(instance, "", _box(instance, tmp_path, "c"), timeout=120)
    assert nothing.resolved == 0  # FAIL_TO_PASS fail at the base commit


def test_patch_that_does_not_apply_is_the_models_failure(instance: dict[str, object], tmp_path: Path) -> None:
    junk = "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1,1 +1,1 @@\n-x\n+y\n"
    v = evaluate(instance, junk, _box(instance, tmp_path, "a"), timeout=60)
    assert (v.resolved, v.verdict) == (0, "patch_failed")


def test_evaluation_that_cannot_run_raises(instance: dict[str, object], tmp_path: Path) -> None:
    no_tests = {**instance, "FAIL_TO_PASS": [], "PASS_TO_PASS": []}
    with pytest.raises(EvaluationError):
        evaluate(no_tests, "", _box(instance, tmp_path, "a"), timeout=60)
    missing_cmd = {**instance, "test_cmd": "no-such-test-runner-here"}
    with pytest.raises(EvaluationError, match="could not run"):
        evaluate(missing_cmd, str(instance["patch"]), _box(instance, tmp_path, "b"), timeout=60)


def test_tests_past_the_deadline_are_unresolved(instance: dict[str, object], tmp_path: Path) -> None:
    slow = {**instance, "test_cmd": "sleep 30; true"}
    v = evaluate(slow, str(instance["patch"]), _box(instance, tmp_path, "a"), timeout=1.0)
    assert (v.resolved, v.verdict) == (0, "timeout")


def test_a_patch_that_breaks_collection_is_the_models_but_an_environment_that_cannot_run_tests_is_ours(
    instance: dict[str, object], tmp_path: Path
) -> None:
    box = _box(instance, tmp_path, "a")
    # a patch that makes every test module fail to import: pytest reports no test at all
    box.run(
        "for f in $(git ls-files '*.py' | grep -v test); do echo 'syntax error (' >> $f; done", timeout=30
    )
    patch = box.diff()
    box.close()
    assert patch.strip()
    v = evaluate(instance, patch, _box(instance, tmp_path, "b"), timeout=120)
    assert (v.resolved, v.verdict) == (0, "unresolved")
    assert set(v.tests.values()) == {"MISSING"}  # collection failed: no test reported
    # a test command that never reports a test, patched or not: the environment, not the model
    silent = {**instance, "test_cmd": "true"}
    with pytest.raises(EvaluationError, match="not even at the base commit"):
        evaluate(silent, str(instance["patch"]), _box(instance, tmp_path, "c"), timeout=60)


def test_tests_killed_from_outside_are_no_verdict_on_the_patch(
    instance: dict[str, object], tmp_path: Path
) -> None:
    # The gold patch resolves (test above); its tests' shell SIGKILLed before they all reported
    # (a sandbox killed under the evaluation, bench chaos's kill_sandbox) must not score it
    # unresolved.
    (first,) = node_ids(instance["FAIL_TO_PASS"])
    pytest_one = f"python -m pytest -rA -p no:cacheprovider {first}"
    killed = {**instance, "test_cmd": f"{pytest_one}; kill -9 $$; :"}
    with pytest.raises(EvaluationError, match="killed"):
        evaluate(killed, str(instance["patch"]), _box(instance, tmp_path, "a"), timeout=120)
    # Only a test process killed (the OOM killer's pick), the shell living on to exit 137: a
    # verdict on the patch, the tests it did not report missing.
    oom = {
        **instance,
        "test_cmd": f"{pytest_one}; python -c 'import os; os.kill(os.getpid(), 9)'; exit $?; :",
    }
    v = evaluate(oom, str(instance["patch"]), _box(instance, tmp_path, "c"), timeout=120)
    assert (v.resolved, v.verdict) == (0, "unresolved") and v.tests[first] == "PASSED", v.tests
    assert "MISSING" in v.tests.values()
    # Killed after every test reported: the verdict stands.
    after = {
        **instance,
        "test_cmd": "bash -c 'python -m pytest -rA -p no:cacheprovider \"$@\"; kill -9 $$' -",
    }
    v = evaluate(after, str(instance["patch"]), _box(instance, tmp_path, "b"), timeout=120)
    assert (v.resolved, v.verdict) == (1, "resolved")
