"""A begun reply continued exactly: from the token ids the server generated, not from their text
(profile ``continuation = "token_ids"``: vLLM; docs/proxy.md, "Resume").

Text is not exact. The relayed text can tokenize differently from the tokens the model chose,
and a chat template may trim what a partial reply ends with (a newline), so a text continuation
(``continue_final_message``) can say something other than the reply it continues. vLLM returns
the ids it generates (``return_token_ids``: the prompt's ids on a stream's first chunk, each
chunk's own ids beside its text) and takes ids as a completion's prompt, so the next life can be
given exactly the sequence the last one had reached: ``/v1/completions`` with the prompt's ids
and the generated ones, ``max_tokens`` less those. Its completion chunks become the client's
chat chunks (``resume.Splice``), and the usage is the uninterrupted reply's.

The ids cost little while a stream is healthy: the proxy asks for them (``ask``), keeps each
chunk's data undecoded as it keeps every relayed chunk, and decodes them only on a resume. A
client that did not ask for ids gets the chunks vLLM sends to a client that did not ask:
``"token_ids":null`` and ``"prompt_token_ids":null`` in place of the lists
(``chat_bytes.hide_ids``: a few byte searches a chunk, about 0.5 µs; SDKs that read the fields
read None, as without the proxy).

Where the ids cannot continue a reply exactly the text route is taken (``why_not``): a chat with
tools (the chat endpoint parses a tool call the continuation begins; a completion would pass
its text on), a completion that echoes its prompt, ids missing from the chunks (a server that did
not send them, vLLM hiding them with a reasoning parser).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import aiohttp

from wedgewatch.proxy.body import Asked
from wedgewatch.proxy.dialects.kind import Kind

TOKEN_IDS = "token_ids"
"""A profile's ``continuation`` for a server that returns its token ids and takes ids as a prompt
(the name supervisor/profiles.py gives it; the proxy does not import the supervisor)."""
ASK = "return_token_ids"
COMPLETIONS = "/v1/completions"
"""Where a continuation from ids goes, whatever the client asked (chat or completions)."""
COMPLETION_DEFAULT_MAX = 16
"""OpenAI's and vLLM's ``max_tokens`` for a completion that names none."""

# What a chat request says that a completion does not take, or takes with another meaning
# (``echo``, ``logprobs``): left out of the continuation. vLLM ignores fields it does not know,
# so the rest (the sampling parameters both endpoints share) go on as the client sent them.
_CHAT_ONLY = frozenset(
    {
        "messages",
        "max_completion_tokens",
        "echo",
        "add_generation_prompt",
        "continue_final_message",
        "chat_template",
        "chat_template_kwargs",
        "add_special_tokens",
        "documents",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning_effort",
        "include_reasoning",
        "return_prompt_text",
        "logprobs",
        "top_logprobs",
        "mm_processor_kwargs",
    }
)


def ask(asked: Asked) -> tuple[Asked, bool]:
    """The request with ``return_token_ids: true``, and whether the client asked for the ids
    itself (then they reach it; else ``chat_bytes.hide_ids`` takes them off). The payload is
    extended by bytes, not encoded again: an agent's prompt is tens of kilobytes."""
    body = asked.body
    if body.get(ASK) is True:
        return asked, True
    had = ASK in body
    body[ASK] = True
    if had:  # the client said false or null: encoded again, once
        payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    else:  # the payload is the compact encoding of a JSON object: add the key before its end
        payload = asked.payload.rstrip()[:-1] + b',"' + ASK.encode() + b'":true}'
    return dataclasses.replace(asked, payload=payload), False


def why_not(kind: Kind, body: Mapping[str, Any]) -> str | None:
    """Why a reply cannot be continued from its ids (the text route is taken), or None."""
    if kind == "chat" and body.get("tools") and body.get("tool_choice") != "none":
        return "tools offered: a completion would not parse a tool call the continuation begins"
    if body.get("echo"):
        return "the prompt is echoed"
    return None


def completion_body(
    kind: Kind, body: Mapping[str, Any], prompt_ids: list[int], ids: list[int]
) -> dict[str, Any]:
    """The ``/v1/completions`` body that continues a reply from its ids: the prompt's ids and the
    generated ones as the prompt, the client's sampling parameters, the token limits less the
    tokens generated. A chat request without a limit gets none here: its budget is what the
    server's context leaves (``with_budget``), which a completion does not default to."""
    out = {k: v for k, v in body.items() if k not in _CHAT_ONLY}
    out["prompt"] = [*prompt_ids, *ids]
    out[ASK] = True  # for a further resume, and for a client that asked
    limit = body.get("max_completion_tokens") if kind == "chat" else None
    if not isinstance(limit, int):
        limit = body.get("max_tokens")
    if not isinstance(limit, int) and kind == "completion":
        limit = COMPLETION_DEFAULT_MAX
    out.pop("max_tokens", None)
    if isinstance(limit, int):
        out["max_tokens"] = max(1, limit - len(ids))
    if isinstance(body.get("min_tokens"), int):
        out["min_tokens"] = max(0, body["min_tokens"] - len(ids))
    return out


async def with_budget(
    session: aiohttp.ClientSession, base_url: str, headers: Mapping[str, str], payload: bytes
) -> bytes | None:
    """A continuation's payload with a ``max_tokens``: as it is when it has one; else the tokens
    the server's context leaves after the prompt (its ``/v1/models`` says ``max_model_len``), as a
    chat request without a limit would have had. None when the server does not say."""
    body = json.loads(payload)
    if isinstance(body.get("max_tokens"), int):
        return payload
    try:
        async with asyncio.timeout(10), session.get(base_url + "/v1/models", headers=headers) as resp:
            models = await resp.json(content_type=None) if resp.status == 200 else None
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        return None
    listed = models.get("data") if isinstance(models, dict) else None
    lengths = {
        m.get("id"): m.get("max_model_len")
        for m in (listed if isinstance(listed, list) else ())
        if isinstance(m, dict) and isinstance(m.get("max_model_len"), int)
    }
    context = lengths.get(body.get("model")) or next(iter(lengths.values()), None)
    if context is None:
        return None
    body["max_tokens"] = max(1, context - len(body["prompt"]))
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def as_leg(chunk: dict[str, Any], kind: Kind, carried: int) -> None:
    """A chunk of the completion that continues a reply from ids, made a chunk of the client's
    stream (in place): for a chat client each choice's text becomes a content delta, in the keys
    and order vLLM writes a chat chunk; the prompt's ids (the first leg's and the generated ones)
    go; the usage becomes the uninterrupted reply's (the ``carried`` tokens generated before were
    this leg's prompt: they move from its prompt to its completion, the total stays)."""
    choices = chunk.get("choices")
    choices = choices if isinstance(choices, list) else []
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            continue
        if kind == "completion":
            if "prompt_token_ids" in choice:
                choice["prompt_token_ids"] = None  # as on every chunk but a stream's first
            continue
        delta: dict[str, Any] = {"content": choice.get("text") or ""}
        out: dict[str, Any] = {"index": choice.get("index", 0), "delta": delta}
        out["logprobs"] = choice.get("logprobs")
        out["finish_reason"] = choice.get("finish_reason")
        if choice.get("finish_reason") is not None:
            out["stop_reason"] = choice.get("stop_reason")
        if TOKEN_IDS in choice:
            out[TOKEN_IDS] = choice[TOKEN_IDS]
        choices[i] = out
    if kind == "chat" and chunk.get("object") == "text_completion":
        chunk["object"] = "chat.completion.chunk"
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        if isinstance(usage.get("prompt_tokens"), int):
            usage["prompt_tokens"] -= carried
        if isinstance(usage.get("completion_tokens"), int):
            usage["completion_tokens"] += carried
