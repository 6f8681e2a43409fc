"""The built-in ``bash`` agent: the loop mini-swe-agent made popular.

The model gets a system prompt and the problem statement; each reply must hold exactly one fenced
```bash block; the block runs in the sandbox and its (truncated) output is the next user message;
the agent submits when a command's output starts with the sentinel line, and the patch is the
sandbox's ``git diff``. Model-side endings are returned (``submitted``, ``early_stop``);
infrastructure failures are raised as ``errors.ApiError`` / ``HarnessError``.
"""

from __future__ import annotations

import functools
import logging
import re
import ssl
import time
from typing import Any

import openai

from wedgewatch.agents import prompts
from wedgewatch.agents.llm_errors import is_context_window, stall_kind, translate
from wedgewatch.agents.trajectory import Trajectory, Turn
from wedgewatch.base.errors import HarnessError, WedgewatchError
from wedgewatch.base.protocols import AgentResult, AgentTask
from wedgewatch.base.vocab import EARLY_STOP, SUBMITTED
from wedgewatch.config import AgentConfig

log = logging.getLogger(__name__)

# The proxy enforces the real deadlines (240 s by default); the client's own timeout is only a
# backstop for running without a proxy, so it is far above any healthy generation.

# What servers say when a prompt is over the context: vLLM "This model's maximum context length is
# N tokens", SGLang/llama.cpp "exceeds the context window"/"context size", OpenAI's code.
_CONTEXT_RE = re.compile(
    r"context[ _]length|context window|context size|maximum (model |context )?length|max_model_len|"
    r"prompt is too long|too many tokens",
    re.IGNORECASE,
)


@functools.cache
def _tls() -> ssl.SSLContext:
    # One verifying context per process (the system's CA store; SSL_CERT_FILE is honoured): the
    # SDK would build one with each client, loading the CA store again (about 40 ms of CPU), and
    # a client is built per attempt, mostly for the proxy's plain HTTP.
    return ssl.create_default_context()


class ContextWindowExceeded(WedgewatchError):
    """The server refused the prompt as longer than the model's context (HTTP 400). Internal:
    becomes ``early_stop``/``context_window``."""


def classify(exc: openai.OpenAIError) -> WedgewatchError:
    """What a failed request means for the attempt (table in docs/agents.md): the context window
    is the model's; any other 4xx is our request's fault (HarnessError: wrong model name, key or
    parameter, retried and then visible as infra_failed, never scored); the rest is
    ``llm_errors.translate``'s ApiError."""
    if isinstance(exc, openai.APIStatusError) and stall_kind(exc) is None:
        status = exc.status_code
        if status in (400, 413) and (
            is_context_window(exc) or _CONTEXT_RE.search(f"{exc.message} {exc.body}")
        ):
            return ContextWindowExceeded(exc.message)
        if 400 <= status < 500 and status not in (408, 429):
            return HarnessError(
                f"the server rejected the request ({status}): {exc.message}"[:300], reason=f"http_{status}"
            )
    return translate(exc)


class BashAgent:
    """One bash block per turn, a sentinel to submit (see the module docstring and docs/agents.md)."""

    name = "bash"

    def __init__(self, cfg: AgentConfig | None = None) -> None:
        self.cfg = cfg or AgentConfig()
        self.request_timeout = self.cfg.client_timeout
        self.max_retries = self.cfg.client_retries

    def run(self, task: AgentTask) -> AgentResult:
        cfg = self.cfg
        traj = Trajectory(
            agent=self.name,
            attempt_id=task.attempt_id,
            instance_id=str(task.instance.get("instance_id", "")),
            model=task.model,
            config={
                "step_limit": cfg.step_limit,
                "token_limit": cfg.token_limit,
                "format_error_limit": cfg.format_error_limit,
                "command_timeout": cfg.command_timeout,
                "output_limit": cfg.output_limit,
                "max_tokens": cfg.max_tokens,
                "temperature": cfg.temperature,
                "request_timeout": self.request_timeout,
                "max_retries": self.max_retries,
            },
        )
        client = openai.OpenAI(
            base_url=task.base_url,
            api_key=task.api_key,
            max_retries=self.max_retries,
            timeout=self.request_timeout,
            http_client=openai.DefaultHttpxClient(verify=_tls()),
        )
        try:
            result = self._loop(task, client, traj)
            traj.finish(result)
        except BaseException as exc:
            traj.fail(exc)
            raise
        finally:
            client.close()
            traj.save(task.trajectory_path)
        return result

    def _loop(self, task: AgentTask, client: openai.OpenAI, traj: Trajectory) -> AgentResult:
        cfg = self.cfg
        traj.messages = [
            {"role": "system", "content": prompts.system_prompt()},
            {
                "role": "user",
                "content": prompts.instance_prompt(
                    str(task.instance.get("repo", "")),
                    str(task.instance.get("problem_statement", "")),
                    cfg.step_limit,
                ),
            },
        ]
        bad_in_a_row = 0
        while True:
            # Limits are checked before a request, as mini-swe-agent does: the reply that crosses a
            # limit is still acted on, so a submission in it counts.
            if len(traj.turns) >= cfg.step_limit:
                return self._stop("step_limit", traj)
            if cfg.token_limit and traj.tokens >= cfg.token_limit:
                return self._stop("token_limit", traj)
            turn = Turn(step=len(traj.turns) + 1, started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            try:
                self._query(client, task.model, traj, turn)
            except ContextWindowExceeded as exc:
                if not traj.turns:
                    # The task itself does not fit (or max_tokens is too large for the server):
                    # not something the model did, so never scored against it.
                    raise HarnessError(
                        f"the first request is already over the server's context window: {exc}",
                        reason="context_window_first_request",
                    ) from exc
                return self._stop("context_window", traj)
            traj.turns.append(turn)
            traj.messages.append({"role": "assistant", "content": turn.reply})
            found = prompts.actions(turn.reply)
            if len(found) != 1:
                turn.format_error = True
                bad_in_a_row += 1
                traj.save(task.trajectory_path)
                if bad_in_a_row >= cfg.format_error_limit:
                    return self._stop("format_errors", traj)
                traj.messages.append({"role": "user", "content": prompts.format_error(len(found))})
                continue
            bad_in_a_row = 0
            turn.action = found[0]
            result = task.sandbox.run(turn.action, timeout=cfg.command_timeout)
            traj.record_command(turn, result)
            if prompts.is_submission(result.output, result.exit_code):
                turn.submitted = True
                return AgentResult(
                    status=SUBMITTED,
                    patch=task.sandbox.diff(),
                    steps=len(traj.turns),
                    tokens=traj.tokens,
                )
            traj.messages.append(
                {
                    "role": "user",
                    "content": prompts.observation(
                        result.exit_code,
                        result.output,
                        cfg.output_limit,
                        cfg.command_timeout if result.timed_out else None,
                    ),
                }
            )
            traj.save(task.trajectory_path)

    def _query(self, client: openai.OpenAI, model: str, traj: Trajectory, turn: Turn) -> None:
        started = time.monotonic()
        try:
            response = client.chat.completions.create(
                model=model,
                messages=traj.messages,  # type: ignore[arg-type]
                max_tokens=self.cfg.max_tokens,
                temperature=self.cfg.temperature,
            )
        except openai.OpenAIError as exc:
            turn.request_seconds = round(time.monotonic() - started, 3)
            raise classify(exc) from exc
        turn.request_seconds = round(time.monotonic() - started, 3)
        choice = response.choices[0] if response.choices else None
        turn.reply = (choice.message.content if choice else None) or ""
        turn.finish_reason = choice.finish_reason if choice else None
        usage: dict[str, Any] = response.usage.model_dump() if response.usage else {}
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        if not usage:
            # No usage block: estimate (4 characters a token) so token_limit still means something.
            prompt = sum(len(m["content"]) for m in traj.messages) // 4
            completion = len(turn.reply) // 4
        turn.usage = {"prompt_tokens": prompt, "completion_tokens": completion}
        traj.prompt_tokens += prompt
        traj.completion_tokens += completion

    @staticmethod
    def _stop(reason: str, traj: Trajectory) -> AgentResult:
        log.info("attempt %s: early_stop %s after %d steps", traj.attempt_id, reason, len(traj.turns))
        return AgentResult(status=EARLY_STOP, reason=reason, steps=len(traj.turns), tokens=traj.tokens)
