"""Grading as the official SWE-bench harness grades, in a fresh container of the instance's image.

The steps are the harness's own (``swebench.harness.run_evaluation.run_instance``), with the
``swebench`` library doing everything it can: its test specification (``make_test_spec``: the
evaluation script of the instance, with the test command's exit status recorded), its chain of
patch commands (``GIT_APPLY_CMDS``, each from a pristine tree), and its grading of the log
(``get_eval_report``: the instance's log parser, FAIL_TO_PASS and PASS_TO_PASS). wedgewatch only
moves the files and runs the commands, through the container sandbox instead of docker-py.

An instance is graded this way when it carries what the library's test specification reads
(``eval_script``, ``log_parser``, ``eval_type``, ``version``: the SWE-bench datasets' schema since
swebench 5) and the run's sandbox is a container; the row's ``source`` is ``swebench``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import EvaluationError
from wedgewatch.base.protocols import Sandbox
from wedgewatch.base.vocab import RESOLVED, UNRESOLVED
from wedgewatch.runner.verdict import Verdict
from wedgewatch.suites.testrun import heredoc

log = logging.getLogger(__name__)

SPEC_FIELDS = ("eval_script", "log_parser", "eval_type", "version")
PATCH_FILE = "/tmp/patch.diff"  # the harness's CONTAINER_PATCH_FILE


def gradable(instance: Mapping[str, Any]) -> bool:
    """Whether the ``swebench`` library can build this instance's test specification."""
    return all(str(instance.get(k) or "").strip() for k in SPEC_FIELDS)


def _apply(sandbox: Sandbox, timeout: float) -> bool:
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    for n, cmd in enumerate(GIT_APPLY_CMDS):
        if n:  # a failed try (notably --reject) leaves partial state: start again from a clean tree
            sandbox.run("git checkout -- . ; git clean -fd", timeout=timeout)
        if sandbox.run(f"{cmd} {PATCH_FILE}", timeout=timeout).exit_code == 0:
            return True
    # The chain can leave the patch fully applied while each command still exited non-zero.
    return sandbox.run(f"git apply --check --reverse {PATCH_FILE}", timeout=timeout).exit_code == 0


def _tests(report: Mapping[str, Any]) -> dict[str, str]:
    """test id -> PASSED/FAILED from the library's tests_status (FAIL_TO_PASS, PASS_TO_PASS)."""
    out: dict[str, str] = {}
    for group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        status = report.get("tests_status", {}).get(group, {})
        out.update({t: "PASSED" for t in status.get("success", [])})
        out.update({t: "FAILED" for t in status.get("failure", [])})
    return out


def grade(
    instance: Mapping[str, Any], patch: str, sandbox: Sandbox, timeout: float, log_dir: Path, image: str
) -> Verdict:
    """Apply ``patch`` in ``sandbox`` (a fresh container of ``image``), run the instance's
    evaluation script, and grade its log with the library. EvaluationError when the library
    cannot grade at all, or says the log shows an environment fault (not the model's doing)."""
    try:
        from swebench.harness.grading import get_eval_report
        from swebench.harness.utils import make_test_spec
    except ImportError as exc:
        raise EvaluationError(f"grading with swebench needs the `swebench` package: {exc}") from None
    iid = str(instance["instance_id"])
    try:
        spec = make_test_spec({**instance, "image": image})
    except (KeyError, ValueError, TypeError) as exc:
        raise EvaluationError(f"{iid}: swebench cannot build its test specification: {exc!r}") from None
    started = time.monotonic()
    step = min(timeout, 120.0)
    sandbox.run(heredoc(f"cat > {PATCH_FILE}", patch), timeout=step)
    if not _apply(sandbox, step):
        return Verdict(0, "patch_failed", duration=time.monotonic() - started)
    sandbox.run(heredoc("cat > /eval.sh", spec.eval_script), timeout=step)
    remaining = max(1.0, timeout - (time.monotonic() - started))
    res = sandbox.run("/bin/bash /eval.sh", timeout=remaining)
    tail = res.output[-4000:]
    if res.timed_out:
        return Verdict(0, "timeout", duration=time.monotonic() - started, output_tail=tail)
    log_dir.mkdir(parents=True, exist_ok=True)
    test_log = log_dir / "test_output.txt"
    test_log.write_text(res.output)
    pred = {"instance_id": iid, "model_name_or_path": "wedgewatch", "model_patch": patch}
    report = get_eval_report(spec, pred, str(test_log), include_tests_status=True)[iid]
    if report.get("infra_failure"):
        reason = report.get("infra_failure_reason", "environment")
        raise EvaluationError(
            f"{iid}: swebench reads an environment fault in the log ({reason}): {tail[-300:]}"
        )
    resolved = int(bool(report["resolved"]))
    verdict = RESOLVED if resolved else UNRESOLVED
    if not report["patch_successfully_applied"]:
        verdict = "tests_unreadable"  # the library found no test results in the log: resolved 0
    return Verdict(
        resolved,
        verdict,
        tests=_tests(report),
        duration=time.monotonic() - started,
        exit_code=res.exit_code,
        output_tail=tail,
    )
