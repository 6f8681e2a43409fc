"""Content fingerprints: hashes of what a request said, never the text itself.

The proxy stores, for each generation request, the hashes of the lines of its first system and
user messages (``lines``) and one hash per message (``messages``). ``audit`` hashes the problem
statements of a suite, or the messages of a harness's own trajectory files, the same way, and
matches. One function does both sides, so they cannot drift apart.

Lines, not whole messages: a harness wraps a problem statement in its own template, so the
statement's text is never a whole message, but its lines survive templating (a template puts the
task on lines of its own, or at worst changes the first). Lines are normalised (whitespace
collapsed, case kept) and short ones dropped (``MIN_LINE``): ``)``, `````` and blank lines are in
every prompt and would only add noise. Hashes are truncated SHA-256 (64 bits as 16 hex digits):
enough that two different lines of one evaluation never collide by chance, and short enough for
a row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

MIN_LINE = 12  # characters, after normalising
MAX_LINES = 400  # per request: a huge pasted file must not make a huge row
# Lines are hashed in the first few system/user messages only: that is where every harness we read
# puts the task (later "user" turns are tool output in mini-swe-agent's text mode), and hashing
# every line of a 60 KB conversation cost the proxy's event loop tens of milliseconds a request.
MAX_PROMPT_MESSAGES = 3
# Roles whose lines are hashed: what the harness wrote, not what the model or a tool answered.
PROMPT_ROLES = frozenset({"system", "user", "developer"})


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of an OpenAI content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return ""


def line_hashes(text: str, limit: int = MAX_LINES) -> list[str]:
    """Hashes of the text's distinct normalised lines of at least MIN_LINE characters, in order."""
    seen: dict[str, None] = {}
    for raw in text.splitlines():
        line = " ".join(raw.split())
        if len(line) >= MIN_LINE:
            seen.setdefault(digest(line), None)
            if len(seen) >= limit:
                break
    return list(seen)


def message_hash(role: str, text: str) -> str:
    return digest(role + "\x00" + " ".join(text.split()))


def of_messages(messages: Iterable[Any]) -> dict[str, list[str]]:
    """``{"lines": [...], "messages": [...]}`` for a chat request's messages."""
    lines: dict[str, None] = {}
    hashes = []
    prompts = 0
    for msg in messages:
        if not isinstance(msg, Mapping):
            continue
        role = str(msg.get("role", ""))
        text = text_of(msg.get("content"))
        hashes.append(message_hash(role, text))
        if role in PROMPT_ROLES and prompts < MAX_PROMPT_MESSAGES and len(lines) < MAX_LINES:
            prompts += 1
            lines.update(dict.fromkeys(line_hashes(text, MAX_LINES - len(lines))))
    return {"lines": list(lines), "messages": hashes}


def response_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A Responses API body's ``instructions`` and ``input`` as the chat messages they stand for:
    instructions are the system message, a string input the user's, message items keep their
    role, a tool's output (``function_call_output``) is a tool message, and items that hold no
    text the harness wrote (function calls, reasoning) are skipped."""
    out: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        out.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        return [*out, {"role": "user", "content": items}]
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, Mapping):
            continue
        if isinstance(item.get("role"), str) and item.get("type", "message") == "message":
            out.append({"role": item["role"], "content": item.get("content")})
        elif item.get("type") == "function_call_output":
            out.append({"role": "tool", "content": item.get("output")})
    return out


def of_request(body: Mapping[str, Any]) -> dict[str, list[str]] | None:
    """Fingerprints of a chat, completion, Responses or Messages API request body, or None when it
    has no text."""
    messages = body.get("messages")
    if isinstance(messages, list):
        system = body.get("system")  # Anthropic's Messages API keeps the system prompt apart
        head = [{"role": "system", "content": system}] if isinstance(system, str | list) else []
        return of_messages([*head, *messages])
    if "input" in body:
        return of_messages(response_messages(body))
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return {"lines": line_hashes(prompt), "messages": [message_hash("prompt", prompt)]}
    return None
