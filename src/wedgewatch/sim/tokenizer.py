"""The simulator's tokenizer: simple, deterministic, lossless.

A token is a run of up to four word characters with the whitespace before it, one punctuation
character with the whitespace before it, or trailing whitespace. That gives about one token per
four characters of English, roughly what BPE tokenizers give, and ``"".join(tokenize(t)) == t``.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(r"\s*\w{1,4}|\s*[^\w\s]|\s+")

# What a chat template adds around each message (role markers, separators), as real templates do.
MESSAGE_OVERHEAD = 4
REPLY_PRIMER = 3


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


def count(text: str) -> int:
    return len(_TOKEN.findall(text))


def content_text(content: Any) -> str:
    """The text of a chat message's ``content``: a string, a list of parts, or None."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
    return "".join(parts)


def message_tokens(m: dict[str, Any]) -> int:
    """Tokens one chat message takes in the prompt, template overhead included."""
    n = MESSAGE_OVERHEAD + count(content_text(m.get("content")))
    for call in m.get("tool_calls") or ():
        n += count(json.dumps(call, separators=(",", ":")))
    return n
