"""Anthropic's Messages API (``POST /v1/messages``) of one answer: its stream of events, or the
whole message (https://docs.anthropic.com/en/api/messages-streaming).

vLLM and llama.cpp's server serve this API beside OpenAI's, and Claude Code speaks nothing else.
A stream frames every event as ``event: <type>`` plus one ``data:`` line: ``message_start``
(the message, empty, with the prompt's usage), then per content block a
``content_block_start``, one ``content_block_delta`` per token and a ``content_block_stop``,
then ``message_delta`` (the stop reason and the output usage) and ``message_stop``. There is no
``[DONE]``.

One unit (token) is one delta: ``thinking_delta`` (reasoning), ``text_delta``, or an
``input_json_delta`` piece of a tool call's input; a call's first unit, its name, is the
``content_block_start`` of its ``tool_use`` block.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from wedgewatch.sim.chunks import Reply, Unit

_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _block_key(u: Unit) -> tuple[str, int]:
    if u.kind in ("tool_head", "tool_args"):
        return "tool", u.call
    return u.kind, -1


class AnthropicEncoder:
    """Encodes one answer of ``/v1/messages``: stream events, or the whole message."""

    def __init__(self, model: str, reply: Reply, prompt: int) -> None:
        self.id = f"msg_{uuid.uuid4().hex[:24]}"
        self.model = model
        self.reply = reply
        self._prompt = prompt  # message_start carries the input usage, before any token
        self._blocks: list[dict[str, Any]] = []  # the content, filled as units are encoded
        self._args: list[str] = []  # each tool_use block's input JSON so far
        self._open: tuple[str, int] | None = None

    @staticmethod
    def _event(kind: str, **fields: Any) -> bytes:
        data = json.dumps({"type": kind, **fields}, separators=(",", ":"), ensure_ascii=False)
        return f"event: {kind}\ndata: {data}\n\n".encode()

    def _stop_reason(self) -> str:
        r = self.reply
        return "stop_sequence" if r.stop_reason is not None else _STOP[r.finish_reason]

    def _message(self, content: list[dict[str, Any]], stop: str | None, output: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": self.reply.stop_reason if stop is not None else None,
            "usage": {"input_tokens": self._prompt, "output_tokens": output},
        }

    def _start(self, key: tuple[str, int]) -> bytes:
        kind, call = key
        if kind == "reasoning":
            block: dict[str, Any] = {"type": "thinking", "thinking": ""}
        elif kind == "content":
            block = {"type": "text", "text": ""}
        else:
            spec = self.reply.tool_calls[call]
            block = {"type": "tool_use", "id": spec["id"], "name": spec["name"], "input": {}}
        self._blocks.append(block)
        self._args.append("")
        return self._event("content_block_start", index=len(self._blocks) - 1, content_block=block)

    def _stop(self) -> bytes:
        if not self._blocks:
            return b""
        i = len(self._blocks) - 1
        if self._blocks[i]["type"] == "tool_use":
            self._blocks[i]["input"] = json.loads(self._args[i]) if self._args[i] else {}
        return self._event("content_block_stop", index=i)

    def _unit(self, u: Unit) -> bytes:
        out = b""
        key = _block_key(u)
        if key != self._open:
            out += self._stop()
            self._open = key
            out += self._start(key)
        i = len(self._blocks) - 1
        block = self._blocks[i]
        if u.kind == "reasoning":
            block["thinking"] += u.text
            out += self._event(
                "content_block_delta", index=i, delta={"type": "thinking_delta", "thinking": u.text}
            )
        elif u.kind == "content":
            block["text"] += u.text
            out += self._event("content_block_delta", index=i, delta={"type": "text_delta", "text": u.text})
        elif u.kind == "tool_args":
            self._args[i] += u.text
            out += self._event(
                "content_block_delta", index=i, delta={"type": "input_json_delta", "partial_json": u.text}
            )
        return out  # a tool_head is its block's start: the call's name

    # --- what the generation sends ------------------------------------------------------------

    def role_chunk(self) -> bytes:
        """``message_start``: the message, empty; its input usage is known once the prompt is."""
        return self._event("message_start", message=self._message([], None, 0))

    def unit_chunks(self) -> list[bytes]:
        return [self._unit(u) for u in self.reply.units]

    def tail(self, prompt: int, completion: int, include_usage: bool) -> bytes:
        """The last block's stop, ``message_delta`` (stop reason, output usage), ``message_stop``."""
        stop = self._stop_reason()
        out = self._stop()
        delta = {"stop_reason": stop, "stop_sequence": self.reply.stop_reason}  # None unless a stop string
        out += self._event("message_delta", delta=delta, usage={"output_tokens": completion})
        return out + self._event("message_stop")

    def body(self, prompt: int) -> dict[str, Any]:
        """The non-streaming answer: the whole message."""
        for u in self.reply.units:
            self._unit(u)
        self._stop()
        return self._message(self._blocks, self._stop_reason(), len(self.reply.units))
