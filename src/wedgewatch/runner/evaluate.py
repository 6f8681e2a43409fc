"""Local evaluation of a submitted patch: in a fresh sandbox, apply the patch, then the instance's
test patch, then run its FAIL_TO_PASS and PASS_TO_PASS tests; resolved when every one passes.

Verdicts (``evaluations.detail_json.verdict``) and who they blame:

- ``resolved`` / ``unresolved``: the tests ran; resolved 1 or 0.
- ``patch_failed``: the model's patch does not apply -> resolved 0 (the model's doing; the
  official harness scores it the same way).
- ``test_patch_failed``: the test patch does not apply on top of the model's patch -> resolved 0
  (usually the model edited the test files; the official harness scores it the same way).
- ``timeout``: the tests ran past ``run.eval_timeout`` -> resolved 0 (a patch that hangs the tests
  is the model's doing).
- anything that stops the evaluation from running at all (no sandbox, the test command missing,
  no tests listed, or no test reported either with the patch or at the base commit: the
  environment cannot run this repository's tests) raises ``EvaluationError``: the runner records resolved NULL, not a failure,
  and tries again, up to ``run.attempts`` evaluations.
- the test command's own shell SIGKILLed before every test reported, with no timeout of ours:
  its process group killed from outside (an operator, a host's cleanup) -> ``EvaluationError``
  too. Scored, it was every test ``MISSING``, an unresolved instance the patch never caused
  (``bench chaos`` found it: a sandbox killed during an evaluation turned a resolved instance
  unresolved). Only the shell's own death counts: a test process the kernel's OOM killer picked
  (a container's ``--memory``, a host out of memory) leaves the shell to exit 137, and a patch
  whose tests outgrow the sandbox stays scored, unresolved, as before.

Tests are run with pytest (``-rA`` prints one ``PASSED``/``FAILED`` line per node id); an
instance may carry its own ``test_cmd`` (the node ids are appended). Real SWE-bench repositories
need their own environments: run those with ``[sandbox] kind = "container"`` (graded with the
``swebench`` library, ``runner.official``), or with the official harness and ``import-report``.
"""

from __future__ import annotations

import logging
import shlex
import signal
import time
from typing import Any

from wedgewatch.base.errors import EvaluationError
from wedgewatch.base.protocols import Sandbox
from wedgewatch.base.vocab import RESOLVED, UNRESOLVED
from wedgewatch.runner.state import Instance, RunContext
from wedgewatch.runner.threads import run_in_thread
from wedgewatch.runner.verdict import Verdict
from wedgewatch.suites.testrun import heredoc, node_ids, parse_verdicts, pytest_command

log = logging.getLogger(__name__)

_OK = frozenset({"PASSED", "XFAIL"})
_COMMAND_MISSING = frozenset({126, 127})
_KILLED = -signal.SIGKILL
"""The command's shell itself SIGKILLed (the sandbox reports a signal negated); a shell that saw
its child killed exits 128 + 9 instead."""


def _apply(sandbox: Sandbox, patch: str, timeout: float) -> bool:
    """git apply, else GNU patch with fuzz (the SWE-bench harness's fallback). Each tool is
    dry-run first, so a patch that does not apply leaves the tree as it was."""
    if not patch.strip():
        return True
    for check, apply in (
        ("git apply --check -", "git apply --whitespace=nowarn -"),
        ("patch --dry-run --batch --fuzz=5 -p1", "patch --batch --fuzz=5 -p1"),
    ):
        if sandbox.run(heredoc(check, patch), timeout=timeout).exit_code == 0:
            return sandbox.run(heredoc(apply, patch), timeout=timeout).exit_code == 0
    return False


def _tests_run_at_base(sandbox: Sandbox, instance: dict[str, Any], cmd: str, timeout: float) -> bool:
    """Whether pytest reports any test at the base commit plus the test patch. Asked only when the
    patched run reported none, to tell a patch that breaks collection (the model's doing) from an
    environment that cannot run the tests at all (ours)."""
    sandbox.run("git checkout -q -- . && git clean -fdq", timeout=60)
    if not _apply(sandbox, str(instance.get("test_patch") or ""), 60):
        return False
    res = sandbox.run(cmd, timeout=timeout)
    return bool(parse_verdicts(res.output))


def evaluate(instance: dict[str, Any], patch: str, sandbox: Sandbox, timeout: float) -> Verdict:
    """Judge ``patch`` on ``instance`` in ``sandbox`` (fresh, at base_commit)."""
    fail_to_pass = node_ids(instance.get("FAIL_TO_PASS") or [])
    pass_to_pass = node_ids(instance.get("PASS_TO_PASS") or [])
    wanted = fail_to_pass + pass_to_pass
    if not wanted:
        raise EvaluationError(f"{instance['instance_id']}: no FAIL_TO_PASS or PASS_TO_PASS tests")
    started = time.monotonic()
    step_timeout = min(timeout, 120.0)
    if not _apply(sandbox, patch, step_timeout):
        return Verdict(0, "patch_failed", duration=time.monotonic() - started)
    if not _apply(sandbox, str(instance.get("test_patch") or ""), step_timeout):
        return Verdict(0, "test_patch_failed", duration=time.monotonic() - started)
    ids = list(dict.fromkeys(wanted))
    custom = instance.get("test_cmd")
    cmd = f"{custom} {shlex.join(ids)}" if custom else pytest_command(ids)
    remaining = max(1.0, timeout - (time.monotonic() - started))
    res = sandbox.run(cmd, timeout=remaining)
    tail = res.output[-4000:]
    if res.timed_out or res.exit_code is None:
        return Verdict(0, "timeout", duration=time.monotonic() - started, output_tail=tail)
    if res.exit_code in _COMMAND_MISSING or "No module named pytest" in tail:
        raise EvaluationError(f"test command could not run (exit {res.exit_code}): {tail[-300:]}")
    found = parse_verdicts(res.output)
    if not found and not _tests_run_at_base(sandbox, instance, cmd, remaining):
        # Not one test reported, and not one at the base commit either: this environment cannot
        # run the instance's tests (a real SWE-bench repository without its dependencies).
        raise EvaluationError(f"the tests do not run here, not even at the base commit: {tail[-300:]}")
    if res.exit_code == _KILLED and not set(wanted) <= found.keys():
        raise EvaluationError(f"the tests were killed (exit {res.exit_code}) before they reported every one")
    tests = {t: found.get(t, "MISSING") for t in wanted}
    resolved = int(all(s in _OK for s in tests.values()))
    return Verdict(
        resolved,
        RESOLVED if resolved else UNRESOLVED,
        tests=tests,
        duration=time.monotonic() - started,
        exit_code=res.exit_code,
        output_tail=tail,
    )


async def evaluate_attempt(ctx: RunContext, inst: Instance, attempt_id: str, eval_no: int) -> int | None:
    """Evaluate the final attempt's patch in a fresh sandbox and write one ``evaluations`` row
    (source ``local``, or ``swebench`` when graded by the library in the instance's container,
    ``runner.official``): resolved 1/0, or NULL with the error when the evaluation could not run.
    ``eval_no`` is the evaluation this runner claimed (``claim.evaluation``)."""
    assert ctx.loop is not None
    rows = ctx.ledger.query("SELECT patch FROM attempt_ends WHERE attempt_id = ?", (attempt_id,))
    patch = str(rows[0]["patch"] or "") if rows else ""
    edir = ctx.workdir / attempt_id / f"eval-{eval_no}"
    instance = inst.record
    timeout = ctx.cfg.run.eval_timeout
    from wedgewatch.runner import official

    # A SWE-bench instance in its own image is graded as the official harness grades it.
    swebench = ctx.cfg.sandbox.kind == "container" and official.gradable(instance)

    def work() -> Verdict:
        sandbox = ctx.make_sandbox(instance, edir / "sandbox")
        try:
            if swebench:
                image = str(getattr(sandbox, "image", ""))
                return official.grade(instance, patch, sandbox, timeout, edir, image)
            return evaluate(instance, patch, sandbox, timeout)
        finally:
            sandbox.close()

    resolved: int | None
    try:
        verdict = await run_in_thread(ctx.loop, work, f"eval-{attempt_id}")
        resolved, detail = verdict.resolved, verdict.detail()
    except Exception as exc:  # anything that kept the evaluation from running is ours, not the model's
        resolved = None
        detail = {"verdict": "error", "error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
        log.warning("evaluation of %s could not run: %s", attempt_id, exc)
    ctx.append(
        "evaluations",
        {
            "attempt_id": attempt_id,
            "ts": time.time(),
            RESOLVED: resolved,
            "source": "swebench" if swebench else "local",
            "detail_json": detail,
            "eval_no": eval_no,
        },
    )
    ctx.counters.evaluations += 1
    return resolved
