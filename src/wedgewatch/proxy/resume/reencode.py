"""The continuation of a begun Responses or Messages stream, generated from ids
(``typed_ids.py``), re-encoded as the client's own events: what its SDK would have read had the
stream never been cut.

The continuation is ``/inference/v1/generate``'s stream (chunks of text and ids, a finish, the
usage). Each chunk's text becomes one text delta of the open item (Responses: an
``output_text.delta`` under the message's item id, ``sequence_number`` going on from the last one
the client got) or block (Messages: a ``text_delta`` at the block's index); the end becomes the
events vLLM ends such a stream with, the whole text in the ``.done`` events and the response
(Responses: ``output_text.done``, ``content_part.done``, ``output_item.done``, then
``response.completed``, or its ``incomplete`` status when the token budget ran out; Messages:
``content_block_stop``, ``message_delta`` with the stop reason, ``message_stop``). The usage is the
whole reply's: the prompt is the request's own, the output every token the client read.

The events go on through the API's own relay (``Translator``, read by ``typed.TypedRelay``): they
are judged, counted and kept for a further resume as the server's would be.
"""

from __future__ import annotations

import json
from typing import Any

from wedgewatch.base.vocab import REPLY_NOT_API, REPLY_NOT_JSON
from wedgewatch.proxy.dialects.chat_bytes import snippet
from wedgewatch.proxy.resume.typed_ids import Begun
from wedgewatch.wire.sse import DONE, SSEEvent


def _event(kind: str, obj: dict[str, Any]) -> SSEEvent:
    return SSEEvent(data=json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode(), event=kind)


class Reencoder:
    """``typed.Translator``: generate chunks in, the client's events out."""

    def __init__(self, begun: Begun) -> None:
        self.begun = begun
        self.text = begun.text  # the whole reply's text so far
        self.seq = begun.last_seq if begun.last_seq is not None else -1
        self.finish: str | None = None
        self.stop: Any = None  # vLLM's stop_reason: the stop string that matched, or a token id
        self.generated = 0  # tokens of the continuation
        self.ended = False
        self.fault: tuple[str, str] | None = None

    def convert(self, events: list[SSEEvent], last: bool) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        for ev in events:
            if ev.data is None or self.ended:
                if ev.data is None:
                    out.append(ev)  # a comment: the relay passes it on as it would the server's
                continue
            if ev.data == DONE:
                out += self._end()
                continue
            try:
                chunk = json.loads(ev.data)
            except ValueError:
                self.fault = (
                    REPLY_NOT_JSON,
                    f"the continuation sent a data line that is not JSON: {snippet(ev.data)}",
                )
                return out
            if not isinstance(chunk, dict):
                self.fault = (REPLY_NOT_API, f"the continuation sent {snippet(ev.data)}")
                return out
            if "error" in chunk:
                out.append(self._error(chunk))
                continue
            out += self._chunk(chunk)
        if last and not self.ended and self.finish is not None:
            out += self._end()  # a stream that ends without [DONE] after its finish
        return out

    def _chunk(self, chunk: dict[str, Any]) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            text = choice.get("text")
            if isinstance(text, str) and text:
                self.text += text
                out.append(self._delta(text))
            ids = choice.get("token_ids")
            self.generated += len(ids) if isinstance(ids, list) else 0
            if choice.get("finish_reason") is not None:
                self.finish, self.stop = str(choice["finish_reason"]), choice.get("stop_reason")
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.generated = usage["completion_tokens"]
        return out

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def _output_tokens(self) -> int:
        return self.begun.text_tokens + self.generated

    def _delta(self, text: str) -> SSEEvent:
        b = self.begun
        if b.kind == "messages":
            obj = {
                "index": b.index,
                "type": "content_block_delta",
                "delta": {"type": "text_delta", "text": text},
            }
            return _event("content_block_delta", obj)
        kind = "response.output_text.delta"
        obj = {
            "content_index": b.content_index,
            "delta": text,
            "item_id": b.item.get("id"),
            "logprobs": [],
            "output_index": b.output_index,
            "sequence_number": self._next(),
            "type": kind,
        }
        return _event(kind, obj)

    def _error(self, chunk: dict[str, Any]) -> SSEEvent:
        err = chunk.get("error") if isinstance(chunk.get("error"), dict) else {}
        assert isinstance(err, dict)
        if self.begun.kind == "messages":
            inner = {"type": "api_error", "message": err.get("message")}
            return _event("error", {"type": "error", "error": inner})
        obj = {"type": "error", "code": err.get("code"), "message": err.get("message"), "param": None}
        return _event("error", {**obj, "sequence_number": self._next()})

    def _end(self) -> list[SSEEvent]:
        self.ended = True
        return self._messages_end() if self.begun.kind == "messages" else self._responses_end()

    def _messages_end(self) -> list[SSEEvent]:
        b = self.begun
        if self.finish == "length":
            reason, sequence = "max_tokens", None
        elif isinstance(self.stop, str):
            reason, sequence = "stop_sequence", self.stop
        else:
            reason, sequence = "end_turn", None
        usage = dict(b.message.get("usage") or {})
        usage.update(input_tokens=b.prompt_tokens, output_tokens=self._output_tokens())
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        return [
            _event("content_block_stop", {"type": "content_block_stop", "index": b.index}),
            _event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}),
            _event("message_stop", {"type": "message_stop"}),
        ]

    def _responses_end(self) -> list[SSEEvent]:
        b = self.begun
        where = {
            "item_id": b.item.get("id"),
            "output_index": b.output_index,
            "content_index": b.content_index,
        }
        part: dict[str, Any] = {"annotations": [], "text": self.text, "type": "output_text", "logprobs": None}
        item = {**b.item, "content": [part], "status": "completed"}
        response = {**b.response, "output": [item], "usage": self._usage()}
        if self.finish == "length":
            response.update(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
        else:
            response["status"] = "completed"
        done: list[tuple[str, dict[str, Any]]] = [
            ("response.output_text.done", {**where, "logprobs": [], "text": self.text}),
            ("response.content_part.done", {**where, "part": part}),
            ("response.output_item.done", {"item": item, "output_index": b.output_index}),
            ("response.completed", {"response": response}),
        ]
        return [_event(k, {**obj, "sequence_number": self._next(), "type": k}) for k, obj in done]

    def _usage(self) -> dict[str, Any]:
        b, out = self.begun, self._output_tokens()
        return {
            "input_tokens": b.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": b.prompt_tokens + out,
        }
