"""The saved record of one attempt by the built-in agent: every message, command, output, exit
code, timing and token count, as JSON. Written after every turn and at the end, whether the
attempt ended well or not, so even a killed run leaves the turns it got through."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import status_of
from wedgewatch.base.files import write_private
from wedgewatch.base.protocols import AgentResult, CommandResult
from wedgewatch.base.vocab import RUNNING

FORMAT = "wedgewatch-trajectory-1"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass(slots=True)
class Turn:
    """One model reply and what came of it."""

    step: int
    started_at: str
    request_seconds: float = 0.0
    usage: dict[str, int] = field(default_factory=dict)
    finish_reason: str | None = None
    reply: str = ""
    action: str | None = None  # the command, when the reply held exactly one block
    format_error: bool = False
    exit_code: int | None = None
    timed_out: bool = False
    command_seconds: float = 0.0
    output: str = ""  # the full output as the sandbox returned it (the model saw it truncated)
    submitted: bool = False


@dataclass(slots=True)
class Trajectory:
    agent: str
    attempt_id: str
    instance_id: str
    model: str
    config: dict[str, Any]
    started_at: str = field(default_factory=_now)
    messages: list[dict[str, str]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    status: str = RUNNING
    reason: str = ""
    patch: str = ""
    error: dict[str, str] | None = None
    ended_at: str | None = None
    _t0: float = field(default_factory=time.monotonic)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def record_command(self, turn: Turn, result: CommandResult) -> None:
        turn.exit_code = result.exit_code
        turn.timed_out = result.timed_out
        turn.command_seconds = round(result.duration, 3)
        turn.output = result.output

    def finish(self, result: AgentResult) -> None:
        self.status, self.reason, self.patch = result.status, result.reason, result.patch
        self.ended_at = _now()

    def fail(self, exc: BaseException) -> None:
        status, reason = status_of(exc)
        self.status, self.reason = status, reason
        self.error = {"type": type(exc).__name__, "message": str(exc)}
        self.ended_at = _now()

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "agent": self.agent,
            "attempt_id": self.attempt_id,
            "instance_id": self.instance_id,
            "model": self.model,
            "config": self.config,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "seconds": round(time.monotonic() - self._t0, 3),
            "status": self.status,
            "reason": self.reason,
            "error": self.error,
            "steps": len(self.turns),
            "tokens": {
                "prompt": self.prompt_tokens,
                "completion": self.completion_tokens,
                "total": self.tokens,
            },
            "patch": self.patch,
            "messages": self.messages,
            "turns": [asdict(t) for t in self.turns],
        }

    def save(self, path: Path | None) -> None:
        """Write atomically (a reader never sees half a file)."""
        if path is None:
            return
        tmp = path.with_name(path.name + ".tmp")
        write_private(tmp, json.dumps(self.to_json(), indent=1))  # the user's only, its directories too
        os.replace(tmp, path)
