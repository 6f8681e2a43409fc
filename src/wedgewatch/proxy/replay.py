"""A begun Responses or Messages stream resumed on the next server life by replay and skip.

A chat or completion stream is continued from its relayed text (``resume.py``); the typed-event
APIs have no such way on every server (no ``continue_final_message`` for an item of a response,
no prefill of a thinking or tool-use block). So the request is sent again whole, and the new
leg's events are swallowed while they repeat what the client already received: the events the
proxy relayed before the life was replaced, kept undecoded while the stream was healthy
(``TypedRelay.sent``) and decoded here only once a resume needs them. From the event that goes
past them on, the new leg's events are forwarded under the first leg's ids (the response's id
and ``created_at``, each item's id and call id, ``sequence_number`` going on from the last one
relayed; the message's id and each tool_use block's id on the Messages API), so the client's SDK
reads one stream. A model at temperature 0 replays its reply, so the swallowed part is what the
client has; when the new leg says anything else (other text, another item, an earlier end) the
client's reply cannot be made whole, and the request fails as without resume, its row saying why
(``departed``, which the exchange writes as ``not_resumed``).

What is compared is what the client reads: every delta's text (output and reasoning text, a
function call's or a tool_use block's arguments), concatenated per part, to the character; and
the order and kind of the events around them (an item or block opened, its part, its end). A
token boundary may fall elsewhere in the replay: a delta that goes past the relayed text is
forwarded with only its new part.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from wedgewatch.wire.sse import SSEEvent

# The field of an Anthropic ``content_block_delta`` that carries its text, by the delta's type.
_DELTA_TEXT = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}
# Events that say nothing of the reply: a Messages stream's keep-alive.
_QUIET = frozenset({"ping"})
# The server's errors in either API: never swallowed, the relay ends the request on them.
_ERRORS = frozenset({"error", "response.failed"})

Key = tuple[Any, ...]


def _type(obj: dict[str, Any], ev: SSEEvent | None = None) -> str:
    return str(obj.get("type") or (ev.event if ev is not None else "") or "")


def _step(obj: dict[str, Any]) -> tuple[Key, str | None]:
    """What one event says of the reply: a key (its kind and where it stands) and, for a delta
    of text, the text."""
    kind = _type(obj)
    where = tuple(obj.get(k) for k in ("output_index", "content_index", "summary_index", "index"))
    delta = obj.get("delta")
    if kind.endswith(".delta") and isinstance(delta, str):  # the Responses API's text deltas
        return (kind, *where), delta
    if kind == "content_block_delta" and isinstance(delta, dict):
        field = _DELTA_TEXT.get(str(delta.get("type")))
        if field is not None and isinstance(delta.get(field), str):
            return (kind, *where, delta["type"]), delta[field]
        return (kind, *where, delta.get("type")), None  # a signature: where it stands, not its bytes
    if isinstance(delta, dict | list):  # an object delta (vLLM's first reasoning events): whole
        return (kind, *where, json.dumps(delta, sort_keys=True)), None
    item = obj.get("item") or obj.get("content_block") or obj.get("part")
    shape = (item.get("type"), item.get("name")) if isinstance(item, dict) else ()
    return (kind, *where, *shape), None


def _ids(obj: dict[str, Any]) -> list[Any]:
    """The ids an event gives the client, in a fixed order (None where one is missing), so that a
    replayed event's ids pair with the relayed one's."""
    for key in ("response", "message", "item", "content_block"):
        inner = obj.get(key)
        if isinstance(inner, dict):
            return [inner.get("id"), inner.get("call_id")]
    return []


@dataclass
class _Step:
    key: Key
    text: str | None  # a text delta's (concatenated over consecutive deltas of one part)
    ids: list[Any]


class Replay:
    """The splice of a replayed leg into the stream the client already reads (``rewrite``)."""

    def __init__(self, sent: list[bytes], cause: tuple[str, str]) -> None:
        self.cause = cause  # the failure the request was resumed from: it ends so if the replay departs
        self.steps: list[_Step] = []
        self.last_seq: int | None = None  # the last sequence_number the client got
        self.created_at: Any = None
        for data in sent:
            try:
                obj = json.loads(data)
            except ValueError:
                continue
            if not isinstance(obj, dict) or _type(obj) in _QUIET:
                continue
            if isinstance(obj.get("sequence_number"), int):
                self.last_seq = obj["sequence_number"]
            resp = obj.get("response")
            if self.created_at is None and isinstance(resp, dict):
                self.created_at = resp.get("created_at")
            key, text = _step(obj)
            last = self.steps[-1] if self.steps else None
            if text is not None and last is not None and last.key == key and last.text is not None:
                last.text += text
            else:
                self.steps.append(_Step(key, text, _ids(obj)))
        self.at = 0  # the step the replay has reached
        self.got = ""  # the replay's text so far within a text step
        self.ids: dict[str, str] = {}  # the replay's ids -> the ones the client knows
        self.offset: int | None = None  # added to the replay's sequence numbers once forwarded
        self.departed: str | None = None  # why the replay is not the reply the client has

    @property
    def caught_up(self) -> bool:
        return self.at >= len(self.steps)

    def rewrite(self, ev: SSEEvent) -> SSEEvent | None:
        """The event as the client gets it, or None to swallow it (the client has it already, or
        the replay ``departed`` from it: then the relay fails the request)."""
        if self.departed is not None:
            return None
        if ev.data is None:
            return ev
        try:
            obj = json.loads(ev.data)
        except ValueError:
            return ev  # the relay judges it
        if not isinstance(obj, dict):
            return ev
        if self.caught_up:
            return self._forward(ev, obj)
        kind = _type(obj, ev)
        if kind in _QUIET:
            return None
        if kind in _ERRORS or "error" in obj:
            return ev  # the server's error goes on to the relay, which ends the request on it
        key, text = _step(obj)
        step = self.steps[self.at]
        if key != step.key or (text is None) != (step.text is None):
            self._depart(f"its event {kind} where the client had {step.key[0]}")
            return None
        if text is None or step.text is None:
            self.ids.update(
                (new, old)
                for new, old in zip(_ids(obj), step.ids, strict=False)
                if isinstance(new, str) and isinstance(old, str)
            )
            self.at += 1
            return None
        self.got += text
        if step.text.startswith(self.got):
            if self.got == step.text:
                self.at, self.got = self.at + 1, ""
            return None
        if self.got.startswith(step.text) and self.at == len(self.steps) - 1:
            # The replay's token boundary fell elsewhere: only the text past the client's goes on.
            rest = self.got[len(step.text) :]
            self.at, self.got = self.at + 1, ""
            if kind == "content_block_delta":
                obj["delta"][_DELTA_TEXT[obj["delta"]["type"]]] = rest
            else:
                obj["delta"] = rest
            return self._forward(ev, obj)
        self._depart(
            f"its text departed from the {len(step.text)} characters the client had"
            f" at {step.key[0]} (the replay's reply is not the one begun)"
        )
        return None

    def _depart(self, why: str) -> None:
        self.departed = f"replayed on the next life, {why}"  # the relay fails the request on it

    def _forward(self, ev: SSEEvent, obj: dict[str, Any]) -> SSEEvent:
        seq = obj.get("sequence_number")
        if isinstance(seq, int) and self.last_seq is not None:
            if self.offset is None:
                self.offset = self.last_seq + 1 - seq
            obj["sequence_number"] = seq + self.offset
        resp = obj.get("response")
        if isinstance(resp, dict) and self.created_at is not None:
            resp["created_at"] = self.created_at
        out = _renamed(obj, self.ids) if self.ids else obj
        data = json.dumps(out, separators=(",", ":"), ensure_ascii=False).encode()
        return SSEEvent(data=data, event=ev.event)


def _renamed(value: Any, ids: dict[str, str]) -> Any:
    """``value`` with every string that is one of the replay's ids replaced by the client's."""
    if isinstance(value, str):
        return ids.get(value, value)
    if isinstance(value, dict):
        return {k: _renamed(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, ids) for v in value]
    return value
