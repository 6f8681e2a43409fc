"""A begun chat or completion stream that text cannot continue exactly, resumed by replay and
skip (``replay.py`` says how and why): a tool call cut inside its arguments, reasoning begun, a
server whose profile has no way to continue a reply. The request is sent again whole; the new
leg's chunks are held, piece by piece (reasoning, content, each tool call's name and arguments),
to the chunks the client has, and swallowed while they repeat them; from the first piece past
them on the chunks go on under the first leg's ``id``, ``created`` and ``model``, without a
second role chunk. The replay's usage is the whole reply's (it generated all of it), so it goes
on as it came. A chunk that ends the replay before it reached the client's text, or says other
text, fails the request as without resume.
"""

from __future__ import annotations

import json
from typing import Any

from wedgewatch.proxy.dialects.kind import Kind
from wedgewatch.proxy.resume.replay import Matcher, Part, dumps, renamed

# Where a piece stands in its chunk: ("delta", field), ("head", i) / ("args", i) of the i-th
# tool-call piece, or ("text",) of a completion's choice.
Slot = tuple[Any, ...]
_FIRST = ("id", "created", "model")  # what the client's stream is known by


def refused(body: dict[str, Any]) -> str | None:
    """Why a chat or completion request cannot be replayed into a begun stream, or None."""
    if (body.get("n") or 1) != 1:
        return "several choices (n > 1)"
    if body.get("logprobs") or body.get("top_logprobs"):
        return "log probabilities were asked for"
    return None


def _pieces(kind: Kind, choice: dict[str, Any]) -> list[tuple[Part, Slot]]:
    """What one choice of a chunk says of the reply, in the order a model writes it."""
    if kind == "completion":
        text = choice.get("text")
        return [(Part(("text",), text, []), ("text",))] if isinstance(text, str) and text else []
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return []
    out: list[tuple[Part, Slot]] = []
    for field in ("reasoning_content", "reasoning", "content"):
        value = delta.get(field)
        if isinstance(value, str) and value:
            label = "content" if field == "content" else "reasoning"
            out.append((Part((label,), value, []), ("delta", field)))
    for i, piece in enumerate(delta.get("tool_calls") or ()):
        if not isinstance(piece, dict):
            continue
        named = piece.get("function")
        fn: dict[str, Any] = named if isinstance(named, dict) else {}
        if fn.get("name") or piece.get("id"):
            out.append(
                (
                    Part(("tool call", piece.get("index"), fn.get("name")), None, [piece.get("id")]),
                    ("head", i),
                )
            )
        args = fn.get("arguments")
        if isinstance(args, str) and args:
            out.append((Part(("tool arguments", piece.get("index")), args, []), ("args", i)))
    return out


def _apply(choice: dict[str, Any], fates: dict[Slot, str | None]) -> None:
    """Drop (None) or cut to the new text (a string) the pieces the client has, in place."""
    got = choice.get("delta")
    delta: dict[str, Any] = got if isinstance(got, dict) else {}
    listed = delta.get("tool_calls")
    calls: list[dict[str, Any]] = listed if isinstance(listed, list) else []
    for slot, fate in fates.items():
        if slot[0] == "text":
            choice["text"] = fate or ""
        elif slot[0] == "delta":
            if fate is None:
                del delta[slot[1]]
            else:
                delta[slot[1]] = fate
        else:
            piece = calls[slot[1]]
            fn = piece.setdefault("function", {})
            if slot[0] == "args":
                if fate is None:
                    fn.pop("arguments", None)
                else:
                    fn["arguments"] = fate
            else:
                for key in ("id", "type"):
                    piece.pop(key, None)
                fn.pop("name", None)
    if calls:
        kept = [p for p in calls if set(p) - {"index", "function"} or p.get("function")]
        if kept:
            delta["tool_calls"] = kept
        else:
            del delta["tool_calls"]


class ChatReplay:
    """The splice of a replayed chat or completion leg into the client's stream (``chat.Rewriter``)."""

    def __init__(self, kind: Kind, sent: list[bytes], cause: tuple[str, str]) -> None:
        self.kind = kind
        self.cause = cause  # the failure the request was resumed from: it ends so if the replay departs
        self.first: dict[str, Any] = {}
        parts: list[Part] = []
        for data in sent:
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if not isinstance(chunk, dict):
                continue
            if not self.first and chunk.get("id") is not None:
                self.first = {k: chunk.get(k) for k in _FIRST}
            for choice in chunk.get("choices") or ():
                if isinstance(choice, dict):
                    parts += [p for p, _ in _pieces(kind, choice)]
        self.matcher = Matcher(parts)

    @property
    def departed(self) -> str | None:
        return self.matcher.departed

    def rewrite(self, data: bytes) -> bytes | None:
        """The chunk as the client gets it, or None to swallow it (the client has all it says,
        or the replay ``departed``: then the relay fails the request)."""
        m = self.matcher
        if m.departed is not None:
            return None
        try:
            chunk = json.loads(data)
        except ValueError:
            return data  # the relay judges it
        if not isinstance(chunk, dict) or "error" in chunk:
            return data
        new = m.caught_up  # forwarded: something the client has not had
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            if choice.get("index", 0) != 0:
                m.depart("it has several choices")
                return None
            fates: dict[Slot, str | None] = {}
            for part, slot in _pieces(self.kind, choice):
                if m.caught_up:
                    new = True
                    continue
                rest = m.match(part)
                if m.departed is not None:
                    return None
                fates[slot] = rest
                new = new or rest is not None
            _apply(choice, fates)
            delta = choice.get("delta")
            if isinstance(delta, dict):
                delta.pop("role", None)  # the client had its role chunk from the first leg
            if choice.get("finish_reason") is not None:
                if not m.caught_up:
                    m.depart(f"it ended ({choice['finish_reason']}) before the text the client had")
                    return None
                new = True
        if not chunk.get("choices") and chunk.get("usage") is not None:
            if not m.caught_up:
                m.depart("it ended before the text the client had")
                return None
            new = True
        if not new:
            return None
        chunk.update(self.first)
        return dumps(renamed(chunk, m.ids))
