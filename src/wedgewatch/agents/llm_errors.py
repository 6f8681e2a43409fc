"""Translate an LLM client's exception (OpenAI SDK, or litellm on top of it) into errors.ApiError.

Walks the exception's cause chain rather than trusting the outermost class: litellm wraps a
refused connection as ``InternalServerError`` (status 500) and drops the response body, but the
OpenAI exception it wraps still holds both. The proxy's stall answer is recognised by its body,
``{"error": {"type": "upstream_stalled", "code": "<stall kind>"}}`` (docs/proxy.md).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import openai

from wedgewatch.base import errors

_MESSAGE_LIMIT = 300


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def _error_object(exc: BaseException) -> dict[str, Any] | None:
    body = getattr(exc, "body", None)
    if not isinstance(body, dict):
        return None
    inner = body.get("error", body)  # the SDK keeps the inner object for an SSE error line
    return inner if isinstance(inner, dict) else None


def stall_kind(exc: BaseException) -> str | None:
    """The proxy's stall code carried anywhere in the chain, or None."""
    for e in _chain(exc):
        err = _error_object(e)
        if err is not None and err.get("type") == "upstream_stalled":
            return str(err.get("code") or errors.UpstreamStalled.default_reason)
    return None


def is_context_window(exc: BaseException) -> bool:
    """The server refused the prompt as longer than its context (a model-side ending)."""
    litellm = sys.modules.get("litellm")
    for e in _chain(exc):
        if litellm is not None and isinstance(e, litellm.exceptions.ContextWindowExceededError):
            return True
        err = _error_object(e)
        if err is not None and err.get("code") == "context_length_exceeded":
            return True
    return False


def _httpx_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """httpx's timeout and transport errors, when a client (litellm) has loaded httpx.

    Never imported here: httpx is not a dependency of ours (the OpenAI SDK moved to httpx2), and
    a first import from an agent thread lets every other thread see a half-made module (the
    SDK looks it up in ``sys.modules``): an AttributeError that once crashed an attempt."""
    mod = sys.modules.get("httpx")
    timeout = getattr(mod, "TimeoutException", None)
    transport = getattr(mod, "TransportError", None)
    if isinstance(timeout, type) and isinstance(transport, type):
        return (timeout,), (transport,)
    return (), ()


def translate(exc: BaseException) -> errors.InfraError:
    """The ApiError subclass for a failed request; AgentCrash when nothing in the chain is an
    API failure (a bug in the client or in our glue)."""
    timeouts, transport = _httpx_errors()
    message = f"{type(exc).__name__}: {exc}"[:_MESSAGE_LIMIT]
    kind = stall_kind(exc)
    if kind is not None:
        return errors.UpstreamStalled(message, reason=kind)
    chain = list(_chain(exc))
    if any(isinstance(e, (openai.APITimeoutError, *timeouts)) for e in chain):
        # Only reached without a proxy (or with a client deadline below the proxy's).
        return errors.UpstreamConnectionError(message, reason="client_timeout")
    if any(isinstance(e, (openai.APIConnectionError, ConnectionError, *transport)) for e in chain):
        return errors.UpstreamConnectionError(message)
    for e in chain:
        if isinstance(e, openai.APIStatusError):
            return errors.UpstreamHTTPError(message, int(e.status_code))
    if any(isinstance(e, openai.APIError) for e in chain):
        return errors.ApiError(message)
    return errors.AgentCrash(message)
