"""Run an instance's tests the way SWE-bench judges them, and read pytest's verdicts.

SWE-bench applies ``test_patch`` over the model's patch, runs the FAIL_TO_PASS and PASS_TO_PASS
tests, and calls the instance resolved when every one of them passes. The verdicts come from
pytest's ``-rA`` summary lines (``PASSED id`` / ``FAILED id - ...``), as SWE-bench's own log
parser reads them; a test that is not reported (not collected, collection error) did not pass.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wedgewatch.base.protocols import Sandbox

_VERDICT = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)")


def node_ids(value: Any) -> list[str]:
    """FAIL_TO_PASS / PASS_TO_PASS as SWE-bench stores them (a JSON string) or as a list."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else []
    return [str(v) for v in value]


def pytest_command(ids: Iterable[str]) -> str:
    """The shell command that runs ``ids`` with a verdict line per test."""
    quoted = " ".join(shlex.quote(i) for i in ids)
    return f"python -m pytest -rA -p no:cacheprovider --color=no {quoted}".rstrip()


def parse_verdicts(output: str) -> dict[str, str]:
    """node id -> PASSED/FAILED/ERROR/... from a ``pytest -rA`` log (the last verdict wins)."""
    verdicts: dict[str, str] = {}
    for line in output.splitlines():
        m = _VERDICT.match(line)
        if m:
            verdicts[m.group(2)] = m.group(1)
    return verdicts


def heredoc(command: str, text: str) -> str:
    """``command`` fed ``text`` on stdin through a quoted heredoc whose marker is not in ``text``."""
    marker = "WEDGEWATCH_EOF"
    while marker in text:
        marker += "_X"
    body = text if text.endswith("\n") else text + "\n"
    return f"{command} <<'{marker}'\n{body}{marker}\n"


def apply_patch_command(patch: str) -> str:
    return heredoc("git apply --whitespace=nowarn -", patch)


@dataclass(slots=True)
class EvalResult:
    """The outcome of one evaluation of an instance in a sandbox."""

    resolved: bool
    fail_to_pass: dict[str, bool] = field(default_factory=dict)
    pass_to_pass: dict[str, bool] = field(default_factory=dict)
    patch_applied: bool = True
    log: str = ""


def evaluate(sandbox: Sandbox, instance: Mapping[str, Any], patch: str, timeout: float) -> EvalResult:
    """Apply ``patch`` and the instance's ``test_patch`` in ``sandbox`` (at base_commit), run the
    FAIL_TO_PASS and PASS_TO_PASS tests, and say whether the instance is resolved."""
    f2p = node_ids(instance.get("FAIL_TO_PASS", []))
    p2p = node_ids(instance.get("PASS_TO_PASS", []))
    log: list[str] = []
    for name, text in (("patch", patch), ("test_patch", str(instance.get("test_patch") or ""))):
        if not text.strip():
            continue
        applied = sandbox.run(apply_patch_command(text), timeout=min(timeout, 60))
        log.append(f"$ git apply {name}\n{applied.output}")
        if applied.exit_code != 0:
            return EvalResult(resolved=False, patch_applied=False, log="\n".join(log))
    result = sandbox.run(pytest_command([*f2p, *p2p]), timeout=timeout)
    log.append(result.output)
    verdicts = parse_verdicts(result.output)
    f2p_ok = {t: verdicts.get(t) == "PASSED" for t in f2p}
    p2p_ok = {t: verdicts.get(t) == "PASSED" for t in p2p}
    resolved = bool(f2p) and all(f2p_ok.values()) and all(p2p_ok.values()) and not result.timed_out
    return EvalResult(resolved, f2p_ok, p2p_ok, True, "\n".join(log))
