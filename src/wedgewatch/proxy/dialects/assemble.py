"""One non-streaming answer assembled from the chunks of a stream.

The proxy always streams upstream (so it can watch tokens); a client that did not ask for a stream
gets what the upstream would have answered without one: ``chat.completion`` or ``text_completion``
with the text, reasoning and tool calls (arguments concatenated per index) of each choice, its
finish reason, logprobs, and the usage from the final chunk.

A message holds what the stream carried and nothing more: reasoning under the key the server
used, tool calls when there were some (or the server sent the key), no ``null`` placeholders.
vLLM's own non-streaming answer has ``"reasoning_content": null`` and ``"tool_calls": []``, but
llama.cpp's has neither and rejects a ``reasoning_content`` that is not a string: an agent that
sends the answer back as the next turn's history (the SDK's ``messages.append(message)``) got a
500 from llama.cpp at its second turn through the proxy.
"""

from __future__ import annotations

from typing import Any, Literal

Kind = Literal["chat", "completion", "responses", "messages"]  # the API of a watched generation

# Keys of a chunk's choice that are merged specially; any other key keeps its last non-null value.
_CHOICE_SPECIAL = frozenset({"index", "delta", "text", "logprobs", "finish_reason"})
_TOP_SKIP = frozenset({"id", "object", "created", "model", "choices", "usage"})


class _Choice:
    __slots__ = (
        "content",
        "extra",
        "finish_reason",
        "logprobs",
        "reasoning",
        "reasoning_key",
        "role",
        "tool_key",
        "tools",
    )

    def __init__(self) -> None:
        # None until the key is seen at all (a completion of zero tokens still has text "").
        self.content: list[str] | None = None
        self.reasoning: list[str] | None = None
        self.reasoning_key: str | None = None  # "reasoning_content" or "reasoning", as the server names it
        self.tool_key = False  # the server's deltas carried "tool_calls"
        self.role = "assistant"
        self.tools: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.logprobs: Any = None
        self.extra: dict[str, Any] = {}


def _merge_logprobs(old: Any, new: Any) -> Any:
    """Chat logprobs are ``{"content": [...]}``; completion logprobs are parallel lists."""
    if new is None:
        return old
    if old is None or not isinstance(old, dict) or not isinstance(new, dict):
        return new
    for key, value in new.items():  # in place: ``old`` is the first chunk's, decoded by us
        if isinstance(value, list) and isinstance(old.get(key), list):
            old[key].extend(value)
        elif value is not None:
            old[key] = value
    return old


class Assembler:
    """Feed decoded chunks in order; ``answer()`` gives the non-streaming JSON object."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.usage: dict[str, Any] | None = None
        self.extra: dict[str, Any] = {}
        self._choices: dict[int, _Choice] = {}

    def feed(self, chunk: dict[str, Any]) -> None:
        self.id = self.id or chunk.get("id")
        self.model = self.model or chunk.get("model")
        self.created = self.created or chunk.get("created")
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        for key, value in chunk.items():
            if key not in _TOP_SKIP:
                _keep(self.extra, key, value)
        for raw in chunk.get("choices") or ():
            if isinstance(raw, dict):
                self._feed_choice(raw)

    def _feed_choice(self, raw: dict[str, Any]) -> None:
        idx = raw.get("index", 0)
        choice = self._choices.get(idx)
        if choice is None:
            choice = self._choices[idx] = _Choice()
        text = raw.get("text")
        if isinstance(text, str):
            choice.content = _add(choice.content, text)
        delta = raw.get("delta")
        if isinstance(delta, dict):
            self._feed_delta(choice, delta)
        if raw.get("logprobs") is not None:
            choice.logprobs = _merge_logprobs(choice.logprobs, raw["logprobs"])
        if raw.get("finish_reason") is not None:
            choice.finish_reason = raw["finish_reason"]
        for key, value in raw.items():
            if key not in _CHOICE_SPECIAL:
                _keep(choice.extra, key, value)

    @staticmethod
    def _feed_delta(choice: _Choice, delta: dict[str, Any]) -> None:
        if isinstance(delta.get("role"), str):
            choice.role = delta["role"]
        content = delta.get("content")
        if isinstance(content, str):
            choice.content = _add(choice.content, content)
        for key in ("reasoning_content", "reasoning"):
            r = delta.get(key)
            if isinstance(r, str):
                choice.reasoning = _add(choice.reasoning, r)
                choice.reasoning_key = key
        choice.tool_key = choice.tool_key or "tool_calls" in delta
        for call in delta.get("tool_calls") or ():
            if not isinstance(call, dict):
                continue
            slot = choice.tools.setdefault(
                call.get("index", len(choice.tools)),
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
            )
            if call.get("id"):
                slot["id"] = call["id"]
            if call.get("type"):
                slot["type"] = call["type"]
            fn = call.get("function")
            if isinstance(fn, dict):
                if fn.get("name"):
                    slot["function"]["name"] += fn["name"]
                if isinstance(fn.get("arguments"), str):
                    slot["function"]["arguments"] += fn["arguments"]

    def answer(self) -> dict[str, Any]:
        choices = [self._choice_answer(i, c) for i, c in sorted(self._choices.items())]
        out: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion" if self.kind == "chat" else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": self.usage,
        }
        out.update(self.extra)
        return out

    def _choice_answer(self, index: int, c: _Choice) -> dict[str, Any]:
        if self.kind == "completion":
            body: dict[str, Any] = {"index": index, "text": "".join(c.content or ())}
        else:
            calls = [c.tools[k] for k in sorted(c.tools)]
            content = None if c.content is None else "".join(c.content)
            message: dict[str, Any] = {
                "role": c.role,
                # vLLM answers null, not "", when a reply is only tool calls.
                "content": None if calls and not content else content,
            }
            if c.reasoning_key is not None:
                message[c.reasoning_key] = "".join(c.reasoning or ())
            if calls or c.tool_key:
                message["tool_calls"] = calls
            body = {"index": index, "message": message}
        body["logprobs"] = c.logprobs
        body["finish_reason"] = c.finish_reason
        body.update(c.extra)
        return body


def _keep(into: dict[str, Any], key: str, value: Any) -> None:
    """The last non-null value wins; a key only ever seen as null stays, as null."""
    if value is not None or key not in into:
        into[key] = value


def _add(parts: list[str] | None, text: str) -> list[str]:
    if parts is None:
        return [text]
    parts.append(text)
    return parts
