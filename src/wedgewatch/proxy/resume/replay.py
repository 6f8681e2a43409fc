"""A begun stream resumed on the next server life by replay and skip.

A chat or completion stream is continued from its relayed text (``continuation.py``), where text can
continue it exactly. The typed-event APIs have no such way on every server (no
``continue_final_message`` for an item of a response, no prefill of a thinking or tool-use
block), and text cannot continue a tool call cut inside its arguments, or reasoning. So the
request is sent again whole, and the new leg's output is swallowed while it repeats what the
client already received: the events (or chunks) the proxy relayed before the life was replaced,
kept undecoded while the stream was healthy (the relay's ``sent``) and decoded only once a resume
needs them. From the first piece past them on, the new leg's output is forwarded under the first
leg's ids (the response's id and ``created_at``, each item's id and call id, ``sequence_number``
going on from the last one relayed; a chat stream's id), so the client's SDK reads one stream.
A model at temperature 0 replays its reply, so the swallowed part is what the client has; when
the new leg says anything else (other text, another item, an earlier end) the client's reply
cannot be made whole, and the request fails as without resume, its row saying why
(``departed``, which the exchange writes as ``not_resumed``).

What is compared is what the client reads: every delta's text (output and reasoning text, a
function call's or a tool_use block's arguments), concatenated per part, to the character; and
the order and kind of what stands around them (an item or block opened and its name, its part,
its end). A token boundary may fall elsewhere in the replay: a delta that goes past the relayed
text is forwarded with only its new part.

``Matcher`` holds one reply's parts to what the client has; ``Replay`` splices the events of the
Responses and Messages APIs (``chat_replay.py``: chat and completion chunks).
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


@dataclass
class Part:
    """One piece of a reply as the client reads it: a key (its kind and where it stands) and,
    for a delta of text, the text; the ids it gives the client, in a fixed order (None where one
    is missing), so that a replayed piece's ids pair with the relayed one's."""

    key: Key
    text: str | None
    ids: list[Any]


class Matcher:
    """The parts the client has, in order (consecutive text of one key joined), and how far a
    replay has come through them."""

    def __init__(self, parts: list[Part]) -> None:
        self.steps: list[Part] = []
        for p in parts:
            last = self.steps[-1] if self.steps else None
            if p.text is not None and last is not None and last.key == p.key and last.text is not None:
                last.text += p.text
            else:
                self.steps.append(Part(p.key, p.text, p.ids))
        self.at = 0  # the step the replay has reached
        self.got = ""  # the replay's text so far within a text step
        self.ids: dict[str, str] = {}  # the replay's ids -> the ones the client knows
        self.departed: str | None = None  # why the replay is not the reply the client has

    @property
    def caught_up(self) -> bool:
        return self.at >= len(self.steps)

    def depart(self, why: str) -> None:
        self.departed = f"replayed on the next life, {why}"

    def match(self, part: Part) -> str | None:
        """Hold the replay's next ``part`` (before ``caught_up``) to what the client has: None
        when the client has all of it (or the replay departed: ``departed`` says why), else the
        part of its text past the client's, which ends the catching up."""
        step = self.steps[self.at]
        if part.key != step.key or (part.text is None) != (step.text is None):
            self.depart(f"its {part.key[0]} where the client had {step.key[0]}")
            return None
        if part.text is None or step.text is None:
            self.ids.update(
                (new, old)
                for new, old in zip(part.ids, step.ids, strict=False)
                if isinstance(new, str) and isinstance(old, str)
            )
            self.at += 1
            return None
        self.got += part.text
        if step.text.startswith(self.got):
            if self.got == step.text:
                self.at, self.got = self.at + 1, ""
            return None
        if self.got.startswith(step.text) and self.at == len(self.steps) - 1:
            # The replay's token boundary fell elsewhere: only the text past the client's goes on.
            rest = self.got[len(step.text) :]
            self.at, self.got = self.at + 1, ""
            return rest
        self.depart(
            f"its text departed from the {len(step.text)} characters the client had"
            f" at {step.key[0]} (the replay's reply is not the one begun)"
        )
        return None


def renamed(value: Any, ids: dict[str, str]) -> Any:
    """``value`` with every string that is one of the replay's ids replaced by the client's."""
    if not ids:
        return value
    if isinstance(value, str):
        return ids.get(value, value)
    if isinstance(value, dict):
        return {k: renamed(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v, ids) for v in value]
    return value


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _type(obj: dict[str, Any], ev: SSEEvent | None = None) -> str:
    return str(obj.get("type") or (ev.event if ev is not None else "") or "")


def _part(obj: dict[str, Any]) -> Part:
    """What one event of the Responses or Messages API says of the reply."""
    kind = _type(obj)
    where = tuple(obj.get(k) for k in ("output_index", "content_index", "summary_index", "index"))
    ids: list[Any] = []
    for key in ("response", "message", "item", "content_block"):
        inner = obj.get(key)
        if isinstance(inner, dict):
            ids = [inner.get("id"), inner.get("call_id")]
            break
    delta = obj.get("delta")
    if kind.endswith(".delta") and isinstance(delta, str):  # the Responses API's text deltas
        return Part((kind, *where), delta, ids)
    if kind == "content_block_delta" and isinstance(delta, dict):
        field = _DELTA_TEXT.get(str(delta.get("type")))
        if field is not None and isinstance(delta.get(field), str):
            return Part((kind, *where, delta["type"]), delta[field], ids)
        return Part((kind, *where, delta.get("type")), None, ids)  # a signature: where, not its bytes
    if isinstance(delta, dict | list):  # an object delta (vLLM's first reasoning events): whole
        return Part((kind, *where, json.dumps(delta, sort_keys=True)), None, ids)
    item = obj.get("item") or obj.get("content_block") or obj.get("part")
    shape = (item.get("type"), item.get("name")) if isinstance(item, dict) else ()
    return Part((kind, *where, *shape), None, ids)


class Replay:
    """The splice of a replayed Responses or Messages leg into the stream the client already
    reads (``typed.EventRewriter``)."""

    def __init__(self, sent: list[bytes], cause: tuple[str, str]) -> None:
        self.cause = cause  # the failure the request was resumed from: it ends so if the replay departs
        self.last_seq: int | None = None  # the last sequence_number the client got
        self.created_at: Any = None
        parts: list[Part] = []
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
            parts.append(_part(obj))
        self.matcher = Matcher(parts)
        self.offset: int | None = None  # added to the replay's sequence numbers once forwarded

    @property
    def departed(self) -> str | None:
        return self.matcher.departed

    def rewrite(self, ev: SSEEvent) -> SSEEvent | None:
        """The event as the client gets it, or None to swallow it (the client has it already, or
        the replay ``departed`` from it: then the relay fails the request)."""
        m = self.matcher
        if m.departed is not None:
            return None
        if ev.data is None:
            return ev
        try:
            obj = json.loads(ev.data)
        except ValueError:
            return ev  # the relay judges it
        if not isinstance(obj, dict):
            return ev
        if m.caught_up:
            return self._forward(ev, obj)
        kind = _type(obj, ev)
        if kind in _QUIET:
            return None
        if kind in _ERRORS or "error" in obj:
            return ev  # the server's error goes on to the relay, which ends the request on it
        rest = m.match(_part(obj))
        if rest is None:
            return None
        delta = obj["delta"]
        if isinstance(delta, dict):  # a content_block_delta
            delta[_DELTA_TEXT[delta["type"]]] = rest
        else:
            obj["delta"] = rest
        return self._forward(ev, obj)

    def _forward(self, ev: SSEEvent, obj: dict[str, Any]) -> SSEEvent:
        seq = obj.get("sequence_number")
        if isinstance(seq, int) and self.last_seq is not None:
            if self.offset is None:
                self.offset = self.last_seq + 1 - seq
            obj["sequence_number"] = seq + self.offset
        resp = obj.get("response")
        if isinstance(resp, dict) and self.created_at is not None:
            resp["created_at"] = self.created_at
        return SSEEvent(data=dumps(renamed(obj, self.matcher.ids)), event=ev.event)
