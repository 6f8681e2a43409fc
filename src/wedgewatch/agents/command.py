"""The `command` agent: any external agent, given as an argv template (AgentConfig.command).

The command runs in the sandbox directory, in its own process group, with the attempt's proxy URL
in ``OPENAI_BASE_URL``/``OPENAI_API_BASE`` and the attempt's key in ``OPENAI_API_KEY``. It gets
the problem statement in a file outside the sandbox (so the file never shows in the patch), and
may hand in its patch by writing it to ``$WEDGEWATCH_PATCH_FILE``; otherwise the patch is the
sandbox's ``git diff``.

Endings (docs/agents.md): exit 0 -> submitted; any other exit code -> early_stop/agent_exit;
killed by a signal we did not send -> AgentCrash(agent_signal); still running at
AgentConfig.timeout -> its whole process group is killed and AgentCrash(agent_timeout). Whether a
request of the attempt stalled is the proxy's record to tell, not the command's exit code.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wedgewatch.base import errors
from wedgewatch.base.files import write_private
from wedgewatch.base.protocols import AgentResult, AgentTask
from wedgewatch.base.vocab import EARLY_STOP, SUBMITTED
from wedgewatch.config import AgentConfig
from wedgewatch.sandbox import groups

log = logging.getLogger(__name__)

PLACEHOLDERS = ("instance_id", "attempt_id", "workdir", "problem_file", "patch_file", "base_url", "model")

# Seconds between SIGTERM and SIGKILL when the command overruns: enough for an agent to flush its
# own log, short enough not to hold a worker.
KILL_GRACE = 3.0


def fill(template: list[str], values: Mapping[str, str]) -> list[str]:
    """Replace the known ``{name}`` placeholders in each argument. Other braces (JSON, shell
    ``${VAR}``) are left alone, so ``str.format``'s escaping rules do not apply."""
    argv = []
    for arg in template:
        for name in PLACEHOLDERS:
            arg = arg.replace("{" + name + "}", values[name])
        argv.append(arg)
    return argv


def _tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"[... {len(text) - limit} characters cut ...]\n" + text[-limit:]


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class CommandAgent:
    """Runs ``AgentConfig.command`` once per attempt."""

    name = "command"

    def __init__(self, cfg: AgentConfig) -> None:
        if not cfg.command:
            raise errors.ConfigError("agent", "command", "the command agent needs an argv template")
        self.cfg = cfg

    def run(self, task: AgentTask) -> AgentResult:
        safe_id = re.sub(r"[^A-Za-z0-9_.-]", "_", task.attempt_id)[:64]
        scratch = Path(tempfile.mkdtemp(prefix=f"wedgewatch-cmd-{safe_id}-"))
        try:
            return self._run(task, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _run(self, task: AgentTask, scratch: Path) -> AgentResult:
        problem_file = scratch / "problem.md"
        problem_file.write_text(str(task.instance.get("problem_statement", "")))
        patch_file = scratch / "patch.diff"
        values = {
            "instance_id": str(task.instance.get("instance_id", "")),
            "attempt_id": task.attempt_id,
            "workdir": str(task.sandbox.path),
            "problem_file": str(problem_file),
            "patch_file": str(patch_file),
            "base_url": task.base_url,
            "model": task.model,
        }
        argv = fill(self.cfg.command, values)
        env = {
            **os.environ,
            "OPENAI_BASE_URL": task.base_url,
            "OPENAI_API_BASE": task.base_url,
            "OPENAI_API_KEY": task.api_key,
            "WEDGEWATCH_ATTEMPT_ID": task.attempt_id,
            "WEDGEWATCH_INSTANCE_ID": values["instance_id"],
            "WEDGEWATCH_MODEL": task.model,
            "WEDGEWATCH_PROBLEM_FILE": values["problem_file"],
            "WEDGEWATCH_PATCH_FILE": values["patch_file"],
        }
        log_path = scratch / "output.log"
        exit_code, timed_out, duration = self._execute(argv, task, env, log_path)
        output = log_path.read_text(errors="replace")
        record: dict[str, Any] = {
            "agent": self.name,
            "argv": argv,
            "cwd": values["workdir"],
            "exit_code": exit_code,
            "timed_out": timed_out,
            "duration": round(duration, 3),
            "output": _tail(output, self.cfg.output_limit),
        }
        try:
            if timed_out:
                raise errors.AgentCrash(
                    f"agent command still running after {self.cfg.timeout:g}s; its process group was killed",
                    reason="agent_timeout",
                )
            if exit_code is None or exit_code < 0:
                raise errors.AgentCrash(
                    f"agent command killed by signal {-(exit_code or 0)}", reason="agent_signal"
                )
            patch, source = self._patch(task, patch_file)
            record["patch_source"] = source
            status, reason = (SUBMITTED, "") if exit_code == 0 else (EARLY_STOP, "agent_exit")
            record["status"], record["reason"] = status, reason
            extra = {k: record[k] for k in ("exit_code", "duration", "output", "patch_source")}
            return AgentResult(status=status, reason=reason, patch=patch, extra=extra)
        except errors.InfraError as exc:
            record["status"], record["reason"] = exc.status, exc.reason
            raise
        finally:
            self._save(task.trajectory_path, record, output)

    def _execute(
        self, argv: list[str], task: AgentTask, env: dict[str, str], log_path: Path
    ) -> tuple[int | None, bool, float]:
        """Run argv to its end or to the deadline; always leaves its process group dead."""
        start = time.monotonic()
        with log_path.open("wb") as log_file:
            try:
                proc = groups.spawn(
                    argv,
                    cwd=task.sandbox.path,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                )
            except OSError as exc:
                raise errors.AgentCrash(f"cannot start agent command {argv[0]!r}: {exc}") from None
            timed_out = False
            with groups.owned(proc):
                try:
                    proc.wait(timeout=self.cfg.timeout)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    _kill_group(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(timeout=KILL_GRACE)
                    except subprocess.TimeoutExpired:
                        pass
                # Children left behind (a background server, a stuck tool) die with the attempt.
                _kill_group(proc.pid, signal.SIGKILL)
                proc.wait()
        return (None if timed_out else proc.returncode), timed_out, time.monotonic() - start

    @staticmethod
    def _patch(task: AgentTask, patch_file: Path) -> tuple[str, str]:
        if patch_file.is_file():
            text = patch_file.read_text(errors="replace")
            if text.strip():
                return text, "patch_file"
        return task.sandbox.diff(), "sandbox"

    @staticmethod
    def _save(path: Path | None, record: dict[str, Any], output: str) -> None:
        if path is None:
            return
        try:
            write_private(path, json.dumps(record, indent=2))  # the user's only, its directories too
            write_private(path.with_suffix(".log"), output)
        except OSError:
            log.exception("could not save the command agent's trajectory to %s", path)
