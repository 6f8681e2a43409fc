"""The Responses API (``POST /v1/responses``) of one answer: its stream of typed events, or the
whole ``response`` object (https://platform.openai.com/docs/api-reference/responses-streaming).

vLLM and SGLang serve this API beside chat completions, and agents built on it (the Codex CLI,
the OpenAI Agents SDK) use nothing else. The stream frames every event as ``event: <type>`` plus
one ``data:`` line, numbers them with ``sequence_number``, opens and closes each output item
around its deltas, and ends with ``response.completed`` (``response.incomplete`` when the token
limit cut the answer), which carries the whole response and its usage. There is no ``[DONE]``.

One unit (token) is one delta event: reasoning text, output text, or a piece of a function call's
arguments; a call's first unit, its name, is the event that opens its item.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from wedgewatch.sim.chunks import Reply, Unit

_ITEM_PREFIX = {"reasoning": "rs", "content": "msg", "tool": "fc"}


def _group(u: Unit) -> tuple[str, int]:
    """The output item a unit belongs to: reasoning, the message, or one function call."""
    if u.kind in ("tool_head", "tool_args"):
        return "tool", u.call
    return u.kind, -1


class ResponsesEncoder:
    """Encodes one answer of ``/v1/responses``: stream events, or the whole response object."""

    def __init__(self, model: str, reply: Reply) -> None:
        self.id = f"resp_{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.reply = reply
        self._seq = 0
        self._items: list[dict[str, Any]] = []  # the output items, filled as units are encoded
        self._open: tuple[str, int] | None = None

    # --- framing ------------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> bytes:
        obj = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
        return f"event: {kind}\ndata: {data}\n\n".encode()

    def _response(self, status: str, output: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
        r = self.reply
        incomplete = r.finish_reason == "length" and status != "in_progress"
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": "incomplete" if incomplete else status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": None,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "metadata": {},
            "usage": usage,
        }

    # --- items --------------------------------------------------------------------------------

    def _item(self, group: tuple[str, int]) -> dict[str, Any]:
        kind, call = group
        item_id = f"{_ITEM_PREFIX[kind]}_{uuid.uuid4().hex[:24]}"
        if kind == "reasoning":
            return {
                "id": item_id,
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": ""}],
            }
        if kind == "content":
            return {
                "id": item_id,
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [{"type": "output_text", "text": "", "annotations": []}],
            }
        spec = self.reply.tool_calls[call]
        return {
            "id": item_id,
            "type": "function_call",
            "call_id": spec["id"],
            "name": spec["name"],
            "arguments": "",
            "status": "in_progress",
        }

    def _opening(self, item: dict[str, Any]) -> bytes:
        index = len(self._items) - 1
        shown = {**item, "content": []} if item["type"] == "message" else item
        out = self._event("response.output_item.added", output_index=index, item=shown)
        if item["type"] == "message":
            part = {"type": "output_text", "text": "", "annotations": []}
            out += self._event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=part,
            )
        return out

    def _closing(self) -> bytes:
        if not self._items:
            return b""
        index = len(self._items) - 1
        item = self._items[index]
        ids = {"item_id": item["id"], "output_index": index}
        if item["type"] == "reasoning":
            out = self._event(
                "response.reasoning_text.done", **ids, content_index=0, text=item["content"][0]["text"]
            )
        elif item["type"] == "message":
            part = item["content"][0]
            out = self._event(
                "response.output_text.done", **ids, content_index=0, text=part["text"], logprobs=[]
            )
            out += self._event("response.content_part.done", **ids, content_index=0, part=part)
            item["status"] = "completed"
        else:
            out = self._event("response.function_call_arguments.done", **ids, arguments=item["arguments"])
            item["status"] = "completed"
        return out + self._event("response.output_item.done", output_index=index, item=item)

    def _unit(self, u: Unit) -> bytes:
        out = b""
        group = _group(u)
        if group != self._open:
            out += self._closing()
            self._open = group
            self._items.append(self._item(group))
            out += self._opening(self._items[-1])
        item = self._items[-1]
        ids = {"item_id": item["id"], "output_index": len(self._items) - 1}
        if u.kind == "reasoning":
            item["content"][0]["text"] += u.text
            out += self._event("response.reasoning_text.delta", **ids, content_index=0, delta=u.text)
        elif u.kind == "content":
            item["content"][0]["text"] += u.text
            out += self._event(
                "response.output_text.delta", **ids, content_index=0, delta=u.text, logprobs=[]
            )
        elif u.kind == "tool_args":
            item["arguments"] += u.text
            out += self._event("response.function_call_arguments.delta", **ids, delta=u.text)
        return out  # a tool_head is the opening of its item: the call's name

    # --- what the generation sends ------------------------------------------------------------

    def role_chunk(self) -> bytes:
        """The events before any token: the response exists and is in progress."""
        shell = self._response("in_progress", [], None)
        return self._event("response.created", response=shell) + self._event(
            "response.in_progress", response=shell
        )

    def unit_chunks(self) -> list[bytes]:
        return [self._unit(u) for u in self.reply.units]

    def tail(self, prompt: int, completion: int, include_usage: bool) -> bytes:
        """The last item's closing events and the terminal event with the whole response."""
        out = self._closing()
        final = self._response("completed", self._items, _usage(prompt, completion, self.reply))
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return out + self._event(kind, response=final)

    def body(self, prompt: int) -> dict[str, Any]:
        """The non-streaming answer: the response object the stream's last event would carry."""
        for u in self.reply.units:
            self._unit(u)
        self._closing()
        return self._response("completed", self._items, _usage(prompt, len(self.reply.units), self.reply))


def _usage(prompt: int, completion: int, reply: Reply) -> dict[str, Any]:
    reasoning = sum(1 for u in reply.units[:completion] if u.kind == "reasoning")
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }
