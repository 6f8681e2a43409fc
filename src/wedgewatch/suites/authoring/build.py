"""Build the bundled suite's JSON from the specs: ``python -m wedgewatch.suites.authoring``.

For every instance it makes the base repository (clean code with the bug), derives the gold patch,
the test patch and the wrong patch with git, runs pytest to find FAIL_TO_PASS and PASS_TO_PASS as
SWE-bench does, and refuses to write an instance whose gold patch does not pass every test or whose
wrong patch passes every FAIL_TO_PASS test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from wedgewatch.suites.authoring.spec import COMMON_FILES, Edit, InstanceSpec, RepoSpec
from wedgewatch.suites.bundled import EXTRA_KEY
from wedgewatch.suites.git import git_env, run_git
from wedgewatch.suites.materialise import base_message, commit_tree, write_files
from wedgewatch.suites.testrun import parse_verdicts

BUNDLED_DIR = Path(__file__).resolve().parent.parent / "bundled"


def _apply(files: dict[str, str], edits: list[Edit]) -> dict[str, str]:
    out = dict(files)
    for path, old, new in edits:
        count = out[path].count(old)
        if count != 1:
            raise SystemExit(f"{path}: {old!r} occurs {count} times (need exactly 1)")
        out[path] = out[path].replace(old, new)
    return out


def _diff_against_base(repo: Path, files: dict[str, str]) -> str:
    write_files(repo, files)
    patch = run_git(repo, "diff", "--no-color", "--no-ext-diff", "HEAD")
    run_git(repo, "checkout", "-q", "--", ".")
    return patch


def _pytest(repo: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "--color=no"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return parse_verdicts(proc.stdout)


def _apply_patches(repo: Path, *patches: str) -> None:
    for patch in patches:
        run_git(repo, "apply", "-", input=patch, env=git_env())


def build_instance(repo_spec: RepoSpec, spec: InstanceSpec, work: Path) -> dict[str, Any]:
    name = repo_spec.repo.split("/")[1]
    iid = f"{repo_spec.repo.replace('/', '__')}-{spec.number:04d}"
    clean = {k: v.format(name=name) for k, v in COMMON_FILES.items()} | repo_spec.files
    base = _apply(clean, spec.bug)
    with_tests = dict(base)
    for path, appended in spec.tests:
        with_tests[path] = with_tests[path] + appended
    decoy = _apply(base, spec.decoy)

    repo = work / iid
    sha = commit_tree(repo, base, base_message(iid), spec.created_at)
    gold_patch = _diff_against_base(repo, {p: clean[p] for p in clean if clean[p] != base[p]})
    test_patch = _diff_against_base(repo, {p: with_tests[p] for p, _ in spec.tests})
    wrong_patch = _diff_against_base(repo, {p: decoy[p] for p in decoy if decoy[p] != base[p]})

    _apply_patches(repo, test_patch)
    before = _pytest(repo)
    _apply_patches(repo, gold_patch)
    after = _pytest(repo)
    run_git(repo, "checkout", "-q", "--", ".")
    _apply_patches(repo, test_patch, wrong_patch)
    wrong = _pytest(repo)
    run_git(repo, "checkout", "-q", "--", ".")

    if not after or any(v != "PASSED" for v in after.values()):
        raise SystemExit(f"{iid}: the gold patch does not pass every test: {after}")
    f2p = sorted(t for t in after if before.get(t) != "PASSED")
    p2p = sorted(t for t in after if before.get(t) == "PASSED")
    if not f2p:
        raise SystemExit(f"{iid}: no test fails before the gold patch")
    if all(wrong.get(t) == "PASSED" for t in f2p):
        raise SystemExit(f"{iid}: the wrong patch passes every FAIL_TO_PASS test")

    return {
        "instance_id": iid,
        "repo": repo_spec.repo,
        "base_commit": sha,
        "problem_statement": spec.problem_statement,
        "hints_text": spec.hints_text,
        "created_at": spec.created_at,
        "version": "0.1",
        "environment_setup_commit": sha,
        "FAIL_TO_PASS": json.dumps(f2p),
        "PASS_TO_PASS": json.dumps(p2p),
        "patch": gold_patch,
        "test_patch": test_patch,
        EXTRA_KEY: {"files": base, "wrong_patch": wrong_patch},
    }


def build_all(out_dir: Path = BUNDLED_DIR) -> list[str]:
    from wedgewatch.suites.authoring import REPOS

    written = []
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for repo_spec in REPOS:
            for spec in repo_spec.instances:
                row = build_instance(repo_spec, spec, Path(tmp))
                path = out_dir / f"{row['instance_id']}.json"
                path.write_text(json.dumps(row, indent=1, sort_keys=False) + "\n", encoding="utf-8")
                written.append(row["instance_id"])
    return written
