"""What one ``data:`` payload of an OpenAI-style stream means to the watchdog.

The streaming path looks at the raw bytes only as much as it must: a token-bearing chunk is found
with a few ``bytes.find`` calls, and JSON is decoded only for the rare chunks the byte test cannot
settle (tool-call fragments, non-compact JSON, usage, errors). Inside a JSON string every ``"`` is
escaped, so a pattern such as ``"content":"`` can only match a real key.

Progress is tokens: content, reasoning, tool-call fragments, completion text. A role-only chunk,
an empty delta, a usage-only chunk and SSE comments are not progress.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Keys whose non-empty string value is generated text. "reasoning" is vLLM >= 0.10's new name.
_TEXT_KEYS = (b'"content":"', b'"reasoning_content":"', b'"reasoning":"', b'"text":"')
# Any JSON spacing: the finish chunk is one per choice, so a regex costs nothing that matters.
_FINISH = re.compile(rb'"finish_reason"\s*:\s*"([^"]*)"')


# A list of token ids: as vLLM writes it (compact), found by bytes; with any spacing, by a regex.
# Inside a JSON string every `"` is escaped, so `"token_ids"` can only be a real key; a list of
# ints holds no `]`.
_IDS_AT = b'token_ids":['
_ID_LISTS = re.compile(rb'("(?:prompt_)?token_ids"\s*:\s*)\[[^\]]*\]')


def hide_ids(data: bytes) -> bytes:
    """A chunk's data as vLLM sends it to a client that did not ask for token ids (the proxy did,
    proxy/resume/token_ids.py): each list of ids (``token_ids``, ``prompt_token_ids``) replaced by null.
    A chunk without one is returned as it is. On every chunk of such a stream: a few byte
    searches, not a regex, for the compact JSON vLLM writes."""
    i = data.find(_IDS_AT)
    if i < 0:
        return _ID_LISTS.sub(rb"\1null", data) if b'token_ids"' in data else data
    parts: list[bytes] = []
    at = 0
    while i >= 0:
        end = data.find(b"]", i)
        if end < 0:
            break
        if data[i - 1 : i] == b'"' or data[max(0, i - 8) : i] == b'"prompt_':  # not another key's end
            parts += (data[at : i + len(_IDS_AT) - 1], b"null")
            at = end + 1
        i = data.find(_IDS_AT, end)
    parts.append(data[at:])
    return b"".join(parts)


def snippet(data: bytes, limit: int = 300) -> str:
    """The start of a payload as one line of text, for an error message or a row."""
    text = data[: limit * 4].decode("utf-8", "replace").strip().replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def is_object(data: bytes) -> bool:
    """Does this ``data:`` payload look like one JSON object? Its first and last bytes are enough to
    tell a well-formed chunk from an HTML page, plain text or a cut line (each a fault of the
    reply); decoding every chunk to be sure would cost the hot path for no real case more."""
    if data[:1] == b"{" and data[-1:] == b"}":
        return True
    stripped = data.strip()
    return stripped[:1] == b"{" and stripped[-1:] == b"}"


def is_error(data: bytes) -> bool:
    """An in-stream error object (vLLM and SGLang send ``data: {"error": ...}``)."""
    return data[:16].lstrip().startswith(b'{"error"')


def has_usage(data: bytes) -> bool:
    return b'"usage":{' in data or b'"usage": {' in data


def is_progress(data: bytes) -> bool:
    """Does this chunk carry generated tokens? Decodes JSON only when the bytes cannot tell."""
    for key in _TEXT_KEYS:
        i = data.find(key)
        if i >= 0 and data[i + len(key) : i + len(key) + 1] != b'"':
            return True
    if b'"tool_calls"' in data or b'": ' in data:
        try:
            return progress_of(json.loads(data))
        except ValueError:
            return False
    return False


def finish_reason(data: bytes) -> str | None:
    m = _FINISH.search(data) if b'"finish_reason"' in data else None
    return m.group(1).decode("utf-8", "replace") if m is not None and m.group(1) else None


def _nonempty(v: Any) -> bool:
    return isinstance(v, str) and v != ""


def progress_of(obj: Any) -> bool:
    """The same question as ``is_progress`` for an already decoded chunk."""
    if not isinstance(obj, dict):
        return False
    for choice in obj.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if _nonempty(choice.get("text")):
            return True
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            continue
        if (
            _nonempty(delta.get("content"))
            or _nonempty(delta.get("reasoning_content"))
            or _nonempty(delta.get("reasoning"))
        ):
            return True
        for call in delta.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and (_nonempty(fn.get("name")) or _nonempty(fn.get("arguments"))):
                return True
    return False


def error_code(obj: Any) -> int:
    """The HTTP-like status of an in-stream error object (500 when it does not say)."""
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict):
        for key in ("code", "status"):
            v = err.get(key)
            if isinstance(v, int) and 400 <= v <= 599:
                return v
            if isinstance(v, str) and v.isdigit() and 400 <= int(v) <= 599:
                return int(v)
    return 500
