"""The request bodies of the other APIs the simulator serves, read as the chat turns and tools
they stand for: the Responses API (``instructions``, ``input`` items, flat function tools) and
Anthropic's Messages API (``system``, content blocks, ``input_schema`` tools). The policy reads
chat messages only, so one policy answers all of them."""

from __future__ import annotations

import json
from typing import Any

from wedgewatch.sim.rejected import bad


def messages(kind: str, body: dict[str, Any]) -> Any:
    """The chat messages of a chat, Responses or Messages body (chat's unchecked: parse checks)."""
    if kind == "responses":
        return responses_messages(body)
    if kind == "messages":
        return anthropic_messages(body)
    return body.get("messages")


def tools(kind: str, value: Any) -> Any:
    """The tools in chat shape (chat's as sent: parse checks them)."""
    if kind == "responses":
        return responses_tools(value)
    if kind == "messages":
        return anthropic_tools(value)
    return value


def responses_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The Responses API's ``instructions`` and ``input`` as the chat messages the policy reads:
    message items keep their role and text, a ``function_call`` item is an assistant tool call,
    a ``function_call_output`` item a tool message; reasoning items carry nothing to read."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise bad("instructions must be a string", "instructions")
    if instructions:
        messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise bad("input must be a string or a non-empty list of items", "input")
    for i, item in enumerate(items):
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message" and isinstance(item.get("role"), str):
            messages.append({"role": item["role"], "content": item.get("content")})
        elif kind == "function_call":
            call = {"name": item.get("name"), "arguments": item.get("arguments", "")}
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": item.get("call_id"), "type": "function", "function": call}],
                }
            )
        elif kind == "function_call_output":
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": str(item.get("output", ""))}
            )
        elif kind != "reasoning":
            raise bad(f"input[{i}] must be a message, function_call or function_call_output item", "input")
    return messages


def _block_text(content: Any) -> str:
    """The text of an Anthropic content: a string, or text blocks (a tool result's too)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))


def anthropic_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The Messages API's ``system`` and ``messages`` as chat messages: text blocks are the text,
    an assistant's ``tool_use`` block a tool call, a user's ``tool_result`` block a tool message."""
    out: list[dict[str, Any]] = []
    system = _block_text(body.get("system"))
    if system:
        out.append({"role": "system", "content": system})
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages must be a non-empty list", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise bad(f"messages[{i}] must be a user or assistant message", "messages")
        content = m.get("content")
        blocks = content if isinstance(content, list) else []
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": b.get("tool_use_id"),
                        "content": _block_text(b.get("content")),
                    }
                )
        calls = [
            {
                "id": b.get("id"),
                "type": "function",
                "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input", {}))},
            }
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
        text = _block_text(content)
        if text or calls or not blocks:
            out.append({"role": m["role"], "content": text, **({"tool_calls": calls} if calls else {})})
    return out


def anthropic_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Messages API tools (``{"name", "description", "input_schema"}``) in chat shape."""
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools
    ):
        raise bad("tools must be a list of tools with a name", "tools")
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t.get("input_schema") or {},
            },
        }
        for t in tools
    ]


def responses_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Responses function tools (``{"type": "function", "name", "parameters"}``) in chat shape."""
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("name"), str) for t in tools
    ):
        raise bad("tools must be a list of function tools (the simulator has no built-in tools)", "tools")
    return [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in tools]
