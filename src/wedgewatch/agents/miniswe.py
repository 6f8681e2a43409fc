"""The `mini-swe-agent` agent: the real mini-swe-agent package (2.4.x) driven inside our sandbox.

mini's own parts do the work: its ``DefaultAgent`` loop, its ``LitellmModel`` (tool calls, pointed
at the attempt's proxy URL) and its ``LocalEnvironment`` (whose commands go through our sandbox,
so they get its scrubbed environment, process group and timeout). Three small subclasses change
only what an evaluation harness must own:

- the model makes exactly one try per request: retries belong to the task, in a fresh sandbox;
- the agent counts tokens and stops at ``AgentConfig.token_limit``;
- the trajectory never holds the API key.

mini and litellm are imported on first use: litellm alone takes seconds to import.
docs/agents.md has the status mapping.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Any

from wedgewatch.agents.llm_errors import is_context_window, translate
from wedgewatch.base import errors
from wedgewatch.base.protocols import AgentResult, AgentTask, Sandbox
from wedgewatch.base.vocab import EARLY_STOP, HARNESS_ERROR, SUBMITTED
from wedgewatch.config import AgentConfig

log = logging.getLogger(__name__)

# mini's exit_status -> our early_stop reason. TokenLimitExceeded is ours (see _Kit).
EARLY_STOPS = {
    "LimitsExceeded": "step_limit",
    "TokenLimitExceeded": "token_limit",
    "TimeExceeded": "time_limit",
    "RepeatedFormatError": "format_errors",
}

# Set before the first import: litellm would otherwise fetch its cost map from the internet at
# import, and mini would print a banner and warn about cost tracking.
_QUIET_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "MSWEA_SILENT_STARTUP": "1",
    "MSWEA_COST_TRACKING": "ignore_errors",
}

# mini's SWE-bench prompt names the Docker image's checkout; ours is the sandbox directory.
_IMAGE_WORKDIR = "/testbed"


def _quiet_imports() -> None:
    for key, value in _QUIET_ENV.items():
        os.environ.setdefault(key, value)


def load_templates(spec: str) -> dict[str, Any]:
    """The prompt templates of a mini config (bundled name or YAML path): agent.system_template,
    agent.instance_template, model.observation_template / format_error_template / model_kwargs,
    environment.env. Everything else in it (model name, limits, Docker settings) is ours to set."""
    _quiet_imports()
    from minisweagent.config import get_config_from_spec

    try:
        data = get_config_from_spec(spec)
    except (OSError, ValueError) as exc:
        raise errors.ConfigError("agent", "miniswe_config", str(exc)) from None
    agent = data.get("agent") or {}
    if not agent.get("system_template") or not agent.get("instance_template"):
        raise errors.ConfigError(
            "agent", "miniswe_config", f"{spec!r} has no agent.system_template/instance_template"
        )
    model = data.get("model") or {}
    return {
        "agent": {k: agent[k] for k in ("system_template", "instance_template")},
        "model": {
            k: model[k]
            for k in ("observation_template", "format_error_template", "model_kwargs")
            if k in model
        },
        "env": dict((data.get("environment") or {}).get("env") or {}),
    }


def _usage_tokens(response: Any) -> int:
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return 0
    total = usage.get("total_tokens")
    if isinstance(total, int):
        return total
    return int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)


@functools.cache
def _kit() -> Any:
    """Import mini and litellm once, and build the three subclasses on top of them."""
    _quiet_imports()
    import litellm
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.exceptions import FormatError, LimitsExceeded
    from minisweagent.models.litellm_model import LitellmModel

    litellm.suppress_debug_info = True  # its "Give Feedback" banner on every error
    litellm.telemetry = False

    class Model(LitellmModel):
        # mini retries a failed request up to 10 times with 4-60 s waits (models/utils/retry.py).
        # Aborting on every exception makes its tenacity loop one try; the task retries instead.
        abort_exceptions = [BaseException]  # type: ignore[list-item]  # noqa: RUF012

        def serialize(self) -> dict[str, Any]:
            data: dict[str, Any] = super().serialize()
            kwargs = data["info"]["config"]["model"].get("model_kwargs") or {}
            kwargs.pop("api_key", None)
            return data

    class Environment(LocalEnvironment):
        def __init__(self, *, sandbox: Sandbox, command_timeout: float, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.sandbox = sandbox
            self.command_timeout = command_timeout

        def execute(self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None) -> Any:
            command = action.get("command", "")
            limit = float(timeout or self.command_timeout)
            result = self.sandbox.run(command, timeout=limit, env=self.config.env)
            output: dict[str, Any]
            if result.timed_out or result.exit_code is None:
                # The shape mini's own LocalEnvironment gives a timed-out command.
                output = {
                    "output": result.output,
                    "returncode": -1,
                    "exception_info": f"An error occurred while executing the command: "
                    f"Command timed out after {limit:g} seconds",
                    "extra": {"exception_type": "TimeoutExpired"},
                }
            else:
                output = {"output": result.output, "returncode": result.exit_code, "exception_info": ""}
            self._check_finished(output)  # raises Submitted on mini's sentinel line
            return output

    class Agent(DefaultAgent):
        def __init__(self, model: Any, env: Any, *, token_limit: int, **kwargs: Any) -> None:
            super().__init__(model, env, **kwargs)
            self.token_limit = token_limit
            self.tokens = 0

        def query(self) -> Any:
            if 0 < self.token_limit <= self.tokens:
                raise LimitsExceeded(
                    {
                        "role": "exit",
                        "content": "TokenLimitExceeded",
                        "extra": {"exit_status": "TokenLimitExceeded", "submission": ""},
                    }
                )
            try:
                message = super().query()
            except FormatError as exc:  # a billed reply that held no valid tool call
                self.tokens += _usage_tokens(exc.messages[0].get("extra", {}).get("response"))
                raise
            self.tokens += _usage_tokens(message.get("extra", {}).get("response"))
            return message

    return Agent, Model, Environment


def _looks_like_patch(text: str) -> bool:
    return "diff --git " in text or text.lstrip().startswith("--- ")


class MiniSweAgent:
    """Runs mini-swe-agent's DefaultAgent on one instance in the attempt's sandbox."""

    name = "mini-swe-agent"

    def __init__(self, cfg: AgentConfig) -> None:
        self.cfg = cfg
        self.templates = load_templates(cfg.miniswe_config)
        # Import mini and litellm now, in the caller's thread: the runner builds one agent before
        # its worker threads start, and concurrent first imports can see half-built modules.
        _kit()

    def _build(self, task: AgentTask) -> Any:
        agent_cls, model_cls, env_cls = _kit()
        workdir = str(task.sandbox.path)
        model_kwargs = {
            **self.templates["model"].get("model_kwargs", {}),
            "api_base": task.base_url,
            "api_key": task.api_key,
            "temperature": self.cfg.temperature,
            "max_tokens": self.cfg.max_tokens,
            "drop_params": True,
            "max_retries": 0,  # the OpenAI client under litellm would retry twice
            # The proxy's deadlines end a stuck request; this only bounds a proxy-less setup.
            "timeout": self.cfg.timeout,
        }
        model = model_cls(
            model_name=f"openai/{task.model}",
            model_kwargs=model_kwargs,
            cost_tracking="ignore_errors",
            **{k: v for k, v in self.templates["model"].items() if k != "model_kwargs"},
        )
        env = env_cls(
            sandbox=task.sandbox,
            command_timeout=self.cfg.command_timeout,
            cwd=workdir,
            timeout=max(1, round(self.cfg.command_timeout)),
            env=self.templates["env"],
        )
        prompts = {k: v.replace(_IMAGE_WORKDIR, workdir) for k, v in self.templates["agent"].items()}
        return agent_cls(
            model,
            env,
            token_limit=self.cfg.token_limit,
            step_limit=self.cfg.step_limit,
            cost_limit=0.0,  # costs are unknown for a self-hosted model
            wall_time_limit_seconds=max(1, round(self.cfg.timeout)),
            max_consecutive_format_errors=self.cfg.format_error_limit,
            output_path=task.trajectory_path,
            **prompts,
        )

    def run(self, task: AgentTask) -> AgentResult:
        agent = self._build(task)
        problem = str(task.instance.get("problem_statement", ""))
        try:
            info = agent.run(problem)
        except errors.WedgewatchError as exc:  # our sandbox failed under mini
            self._save(agent, task.trajectory_path, exc.__class__.__name__, str(exc))
            raise
        except Exception as exc:
            if is_context_window(exc):
                result = self._result(agent, task, EARLY_STOP, "context_window", type(exc).__name__)
                self._save(agent, task.trajectory_path, result.status, result.reason)
                return result
            mapped = translate(exc)
            self._save(agent, task.trajectory_path, mapped.status, mapped.reason)
            raise mapped from exc
        exit_status = str(info.get("exit_status", ""))
        if exit_status == "Submitted":
            result = self._result(agent, task, SUBMITTED, "", exit_status, str(info.get("submission", "")))
        elif exit_status in EARLY_STOPS:
            result = self._result(agent, task, EARLY_STOP, EARLY_STOPS[exit_status], exit_status)
        else:
            self._save(agent, task.trajectory_path, HARNESS_ERROR, f"exit_status {exit_status}")
            raise errors.AgentCrash(f"mini-swe-agent ended with exit status {exit_status!r}")
        self._save(agent, task.trajectory_path, result.status, result.reason)
        return result

    def _result(
        self, agent: Any, task: AgentTask, status: str, reason: str, exit_status: str, submission: str = ""
    ) -> AgentResult:
        # mini's swebench prompt submits `cat patch.txt`; its default prompt submits nothing and
        # leaves the patch in the working tree.
        if _looks_like_patch(submission):
            patch, source = submission, "submission"
        else:
            patch, source = task.sandbox.diff(), "sandbox"
        return AgentResult(
            status=status,
            reason=reason,
            patch=patch,
            steps=int(agent.n_calls),
            tokens=int(agent.tokens),
            extra={"exit_status": exit_status, "patch_source": source, "format": "toolcall"},
        )

    @staticmethod
    def _save(agent: Any, path: Path | None, status: str, reason: str) -> None:
        if path is None:
            return
        try:
            agent.save(path, {"info": {"wedgewatch": {"status": status, "reason": reason}}})
        except Exception:  # a trajectory we cannot write must not hide how the attempt ended
            log.exception("could not save the mini-swe-agent trajectory to %s", path)
