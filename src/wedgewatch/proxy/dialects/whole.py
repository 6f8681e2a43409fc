"""What a whole (non-streamed) answer of each API is, and what its row reads of it.

A non-streaming request goes upstream as the client sent it and its answer comes back whole
(``answers.Answers._whole``); a Responses stream's terminal event carries such a whole response
too. The proxy reads only its usage and finish reason, for the request's row: the client gets the
server's bytes.
"""

from __future__ import annotations

from typing import Any

from wedgewatch.proxy.dialects.kind import Kind


def is_answer(kind: Kind, obj: Any) -> bool:
    """Whether ``obj`` is a whole answer of the API ``kind``: chat and completions have
    ``choices``, the Responses API is a ``response`` object with ``output``, the Messages API a
    ``message`` with ``content``."""
    if not isinstance(obj, dict):
        return False
    if kind in ("chat", "completion"):
        return isinstance(obj.get("choices"), list) and bool(obj["choices"])
    if kind == "responses":
        return isinstance(obj.get("output"), list)
    return obj.get("type") == "message" and isinstance(obj.get("content"), list)


def summary(kind: Kind, obj: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """A whole answer's usage and finish reason: the first choice's ``finish_reason`` (chat and
    completions), the reason a response is incomplete or else its ``status`` (Responses), the
    ``stop_reason`` (Messages)."""
    usage = obj.get("usage")
    finish: Any = None
    if kind in ("chat", "completion"):
        choices = obj.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        finish = first.get("finish_reason") if isinstance(first, dict) else None
    elif kind == "responses":
        details = obj.get("incomplete_details")
        finish = (details.get("reason") if isinstance(details, dict) else None) or obj.get("status")
    else:
        finish = obj.get("stop_reason")
    return (usage if isinstance(usage, dict) else None), (None if finish is None else str(finish))


def output_tokens(usage: dict[str, Any] | None) -> int:
    """The tokens a whole answer generated, by its usage (chat and completions name them
    ``completion_tokens``, the Responses and Messages APIs ``output_tokens``); 0 without one."""
    if usage is None:
        return 0
    n = usage.get("completion_tokens", usage.get("output_tokens"))
    return n if isinstance(n, int) and n > 0 else 0
