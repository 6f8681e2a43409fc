"""Reading a generation request's body the way vLLM's OpenAI server does, and its error answers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from wedgewatch.sim import dialects, tokenizer
from wedgewatch.sim.rejected import RequestRejected, bad, error_response

__all__ = ["GenRequest", "Kind", "RequestRejected", "error_response", "parse"]

Kind = Literal["chat", "completion", "responses", "messages"]


@dataclass(slots=True)
class GenRequest:
    """A validated generation request."""

    kind: Kind
    model: str
    adapter: str | None  # the LoRA adapter it is served as, or None for the base model
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    max_tokens: int | None
    stream: bool
    include_usage: bool
    stop: list[str]
    prompt_tokens: int
    match_text: str  # the last user message, or the completion prompt
    prefix_keys: list[tuple[int, int]] = field(default_factory=list)
    """(hash, prompt tokens) of each message prefix, shortest first: the prefix cache's keys."""
    continues: str | None = None
    """The text of a last assistant message to continue (vLLM's ``continue_final_message``): the
    reply goes on from there instead of starting afresh (``messages`` is then without it)."""


def _int_or_none(body: dict[str, Any], key: str) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise bad(f"{key} must be a positive integer, got {v!r}", key)
    return v


def parse(
    body: Any,
    kind: Kind,
    served_names: list[str],
    adapters: dict[str, str],
    max_model_len: int,
) -> GenRequest:
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    model = body.get("model", served_names[0])
    if not isinstance(model, str):
        raise bad("model must be a string", "model")
    if model in served_names:
        adapter = None
    elif model in adapters:
        adapter = model
    else:
        raise RequestRejected(404, f"The model `{model}` does not exist.", "model")
    n = body.get("n", 1)
    if n != 1:
        raise bad("the simulator serves n=1 only", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("stream must be a boolean", "stream")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise bad("stream_options must be an object", "stream_options")
    include_usage = bool(opts.get("include_usage", False))
    max_tokens = (
        _int_or_none(body, "max_output_tokens")
        if kind == "responses"
        else _int_or_none(body, "max_completion_tokens") or _int_or_none(body, "max_tokens")
    )
    stop = body.get("stop_sequences" if kind == "messages" else "stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise bad("stop must be a string or a list of strings", "stop")

    tools = dialects.tools(kind, body.get("tools"))
    if tools is not None and not (
        isinstance(tools, list)
        and all(isinstance(t, dict) and isinstance(t.get("function"), dict) for t in tools)
    ):
        raise bad("tools must be a list of function tools", "tools")
    continues: str | None = None
    if kind != "completion":
        messages = dialects.messages(kind, body)
        if not isinstance(messages, list) or not messages:
            raise bad("messages must be a non-empty list", "messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise bad(f"messages[{i}] must be an object with a role", "messages")
            content = m.get("content")
            if content is not None and not isinstance(content, str | list):
                raise bad(f"messages[{i}].content must be a string or a list of parts", "messages")
        if body.get("continue_final_message") is True:
            if messages[-1]["role"] != "assistant":
                raise bad("continue_final_message needs a last assistant message", "messages")
            if body.get("add_generation_prompt", True) is not False:
                # vLLM refuses both at once: there would be no final message left to continue.
                raise bad("continue_final_message and add_generation_prompt cannot both be true")
            continues = tokenizer.content_text(messages[-1].get("content"))
        keys: list[tuple[int, int]] = []
        h, prompt_tokens = 0, tokenizer.REPLY_PRIMER
        match_text = ""
        for m in messages:
            text = tokenizer.content_text(m.get("content"))
            if m["role"] == "user":
                match_text = text
            h = hash((h, m["role"], text))
            prompt_tokens += tokenizer.message_tokens(m)
            keys.append((h, prompt_tokens))
        if tools:
            prompt_tokens += tokenizer.count(json.dumps(tools, separators=(",", ":")))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt_tokens, match_text = len(prompt), ""
        elif isinstance(prompt, str):
            prompt_tokens, match_text = tokenizer.count(prompt), prompt
        else:
            raise bad("prompt must be a string (one prompt per request)", "prompt")
        messages = [{"role": "user", "content": match_text}]
        keys = [(hash(("prompt", match_text)), prompt_tokens)]
        tools = None

    total = prompt_tokens + (max_tokens or 0)
    if total > max_model_len:
        if max_tokens is None:
            msg = (
                f"This model's maximum context length is {max_model_len} tokens. However, your request "
                f"has {prompt_tokens} input tokens. Please reduce the length of the input messages."
            )
        else:
            msg = (
                f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                f"{total} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion). "
                "Please reduce the length of the messages or completion."
            )
        raise bad(msg, {"chat": "messages", "responses": "input", "messages": "messages"}.get(kind, "prompt"))
    return GenRequest(
        kind=kind,
        model=model,
        adapter=adapter,
        messages=messages,
        tools=tools or None,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=include_usage,
        stop=stop,
        prompt_tokens=prompt_tokens,
        match_text=match_text,
        prefix_keys=keys,
        continues=continues,
    )
