"""The default policy: deterministic filler text of the requested length, and tool calls on request.

Rules:
- the reply is ``max_tokens`` tokens long (64 when the request sets no limit), built from short
  words that the simulator's tokenizer counts as one token each; the words are picked by a hash of
  the seed and the prompt, so the same request gets the same reply;
- when the request carries ``tools`` and the last user message names one of the tools' functions,
  the reply is a call to the first such function (no text), with arguments made from its JSON
  schema's properties (strings "filler", numbers 1, booleans true, arrays [], objects {}).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from wedgewatch.sim import tokenizer
from wedgewatch.sim.policy import PolicyReply, PolicyRequest

DEFAULT_TOKENS = 64
_WORDS = [
    "the",
    "sim",
    "is",
    "up",
    "and",
    "all",
    "is",
    "well",
    "so",
    "far",
    "now",
    "we",
    "wait",
    "for",
    "the",
    "next",
    "tick",
    "of",
    "the",
    "time",
    "then",
    "send",
    "one",
    "more",
    "word",
    "to",
    "you",
    "as",
    "a",
    "test",
    "of",
    "flow",
]
_SAMPLE = {"string": "filler", "integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}


def filler_text(n: int, salt: bytes) -> str:
    """``n`` tokens of filler: one-token words, a full stop every dozen or so."""
    digest = hashlib.sha256(salt).digest()
    out = []
    for i in range(n):
        if i % 13 == 12:
            out.append(".")
        else:
            out.append(" " + _WORDS[(digest[i % 32] + i) % len(_WORDS)])
    return "".join(out)


def _arguments(schema: dict[str, Any]) -> str:
    props = schema.get("properties") or {}
    args = {k: _SAMPLE.get(str(v.get("type")), "filler") for k, v in props.items() if isinstance(v, dict)}
    return json.dumps(args)


class FillerPolicy:
    def reply(self, request: PolicyRequest) -> PolicyReply:
        last = request.messages[-1] if request.messages else {}
        last_text = tokenizer.content_text(last.get("content"))
        for tool in request.tools or ():
            fn = tool.get("function") or {}
            name = fn.get("name")
            if isinstance(name, str) and name and name in last_text:
                digest = hashlib.sha256(f"{request.seed}:{last_text}".encode()).hexdigest()
                call = {
                    "id": f"chatcmpl-tool-{digest[:24]}",
                    "name": name,
                    "arguments": _arguments(fn.get("parameters") or {}),
                }
                return PolicyReply(tool_calls=[call])
        n = request.max_tokens or DEFAULT_TOKENS
        salt = f"{request.seed}:{json.dumps(request.messages, sort_keys=True, default=str)}".encode()
        return PolicyReply(text=filler_text(n, salt))
