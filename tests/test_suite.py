"""The bundled suite: SWE-bench fields, deterministic base commits, and real pytest runs proving
that every instance is well formed (gold fixes it, the wrong patch does not, tests alone fail)."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from wedgewatch.base.errors import SandboxError, SuiteError
from wedgewatch.sandbox.local import LocalSandbox
from wedgewatch.suites import (
    bundled_extras,
    bundled_repo_source,
    evaluate,
    load_bundled,
    materialise,
    node_ids,
    parse_verdicts,
    pytest_command,
)
from wedgewatch.suites.git import run_git
from wedgewatch.suites.testrun import apply_patch_command

FIELDS = {
    "instance_id",
    "repo",
    "base_commit",
    "problem_statement",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "patch",
    "test_patch",
    "version",
    "created_at",
    "environment_setup_commit",
    "hints_text",
}
# Plugins of the dev venv only slow pytest's start-up; the bundled repositories need none.
FAST = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def test_bundled_instances_have_swebench_fields() -> None:
    instances = load_bundled()
    assert 18 <= len(instances) <= 25
    ids = [i["instance_id"] for i in instances]
    assert len(set(ids)) == len(ids)
    assert len({i["repo"] for i in instances}) >= 3
    for inst in instances:
        assert set(inst) == FIELDS, inst["instance_id"]
        owner, name = inst["repo"].split("/")
        assert re.fullmatch(rf"{owner}__{name}-\d{{4}}", inst["instance_id"])
        assert re.fullmatch(r"[0-9a-f]{40}", inst["base_commit"])
        assert isinstance(inst["FAIL_TO_PASS"], str) and isinstance(inst["PASS_TO_PASS"], str)
        assert json.loads(inst["FAIL_TO_PASS"]) and json.loads(inst["PASS_TO_PASS"])
        assert inst["patch"].startswith("diff --git") and inst["test_patch"].startswith("diff --git")
        assert "tests/" not in inst["patch"].split("\n", 1)[0]
    # Some instances need more than one file changed (more steps for the agent).
    assert any(i["patch"].count("diff --git") > 1 for i in instances)


def test_load_bundled_returns_fresh_copies() -> None:
    first = load_bundled()
    first[0]["problem_statement"] = "changed"
    assert load_bundled()[0]["problem_statement"] != "changed"


def test_materialise_gives_the_recorded_base_commit(tmp_path: Path) -> None:
    for inst in load_bundled():
        dest = materialise(inst, tmp_path / inst["instance_id"])
        assert run_git(dest, "rev-parse", "HEAD").strip() == inst["base_commit"]
        assert run_git(dest, "status", "--porcelain") == ""
        files = bundled_repo_source(inst)
        assert (dest / "pyproject.toml").read_text() == files["pyproject.toml"]
        # The FAIL_TO_PASS tests arrive with test_patch, as in SWE-bench: absent at base.
        for test in node_ids(inst["FAIL_TO_PASS"]):
            path, _, func = test.partition("::")
            assert f"def {func}(" not in (dest / path).read_text()


def test_materialise_refuses_a_wrong_base_commit(tmp_path: Path) -> None:
    inst = load_bundled()[0] | {"base_commit": "0" * 40}
    with pytest.raises(SandboxError, match="differs from base_commit"):
        materialise(inst, tmp_path / "x")


def test_unknown_instance_is_a_suite_error() -> None:
    with pytest.raises(SuiteError, match="not in the bundled suite"):
        bundled_repo_source({"instance_id": "someone__else-1"})


def _check(inst: dict[str, Any], root: Path) -> list[str]:
    """Problems with one instance, found by running its tests for real (empty: all good)."""
    problems: list[str] = []
    f2p, p2p = node_ids(inst["FAIL_TO_PASS"]), node_ids(inst["PASS_TO_PASS"])
    box = LocalSandbox.create(inst, root)
    try:
        assert box.run(apply_patch_command(inst["test_patch"]), 30).exit_code == 0
        wrong = bundled_extras(inst).wrong_patch
        for label, patch, want_f2p in (
            ("tests only", "", False),
            ("wrong", wrong, None),
            ("gold", inst["patch"], True),
        ):
            if patch:
                assert box.run(apply_patch_command(patch), 30).exit_code == 0, label
            got = parse_verdicts(box.run(pytest_command(f2p + p2p), 60, env=FAST).output)
            f2p_passed = [got.get(t) == "PASSED" for t in f2p]
            if want_f2p is False and any(f2p_passed):
                problems.append(f"{label}: a FAIL_TO_PASS test passes")
            if want_f2p is None and all(f2p_passed):
                problems.append(f"{label}: every FAIL_TO_PASS test passes")
            if want_f2p is True and not all(f2p_passed):
                problems.append(f"{label}: a FAIL_TO_PASS test fails: {got}")
            if label != "wrong" and not all(got.get(t) == "PASSED" for t in p2p):
                problems.append(f"{label}: a PASS_TO_PASS test fails: {got}")
            if patch:
                assert (
                    box.run(apply_patch_command(patch).replace("git apply", "git apply -R", 1), 30).exit_code
                    == 0
                )
    finally:
        box.close()
    return [f"{inst['instance_id']}: {p}" for p in problems]


@pytest.mark.long
def test_every_instance_is_well_formed(tmp_path: Path) -> None:
    """Tests alone: FAIL_TO_PASS fail, PASS_TO_PASS pass. Gold + tests: all pass. The wrong patch
    the simulator plays: some FAIL_TO_PASS test still fails."""
    instances = load_bundled()
    with ThreadPoolExecutor(max_workers=2) as pool:
        problems = [p for found in pool.map(lambda i: _check(i, tmp_path), instances) for p in found]
    assert problems == []


def test_evaluate_resolves_gold_and_rejects_no_patch(tmp_path: Path) -> None:
    inst = load_bundled()[0]
    for patch, resolved in ((inst["patch"], True), ("", False)):
        box = LocalSandbox.create(inst, tmp_path)
        try:
            verdict = evaluate(box, inst, patch, timeout=60)
        finally:
            box.close()
        assert verdict.resolved is resolved
        assert verdict.pass_to_pass and all(verdict.pass_to_pass.values())
        assert all(verdict.fail_to_pass.values()) is resolved


def test_parse_verdicts_reads_pytest_summary_lines() -> None:
    log = "PASSED tests/a.py::t1\nFAILED tests/a.py::t2 - assert 1 == 2\nERROR tests/b.py::t[x-1]\nnoise\n"
    assert parse_verdicts(log) == {
        "tests/a.py::t1": "PASSED",
        "tests/a.py::t2": "FAILED",
        "tests/b.py::t[x-1]": "ERROR",
    }
