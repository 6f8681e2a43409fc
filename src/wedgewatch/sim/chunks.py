"""The bytes of an answer, encoded once per request so the token loop only joins them.

A reply is a list of *units*, one generated token each: reasoning tokens, content tokens, then
tool-call pieces (a header naming the function, then its arguments in pieces), as vLLM streams them.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from wedgewatch.sim import tokenizer
from wedgewatch.sim.policy import PolicyReply

DONE = b"data: [DONE]\n\n"
PING = b": ping\n\n"


def _j(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


@dataclass(slots=True)
class Unit:
    kind: Literal["reasoning", "content", "tool_head", "tool_args"]
    text: str
    call: int = -1  # index of the tool call (tool units)


@dataclass(slots=True)
class Reply:
    """A reply cut to its limits: the units to send and how the generation finishes."""

    units: list[Unit]
    finish_reason: str  # stop, length or tool_calls
    stop_reason: str | None
    tool_calls: list[dict[str, str]] = field(default_factory=list)


def plan_reply(
    reply: PolicyReply, max_tokens: int, stop: list[str], tools_allowed: bool, skip: str | None = None
) -> Reply:
    """Tokenize the policy's reply, apply ``stop`` strings and the token limit. ``skip``: the text
    of a reply already begun (a continued final message): the units it covers are not sent again,
    so the continuation is exactly the rest of the one reply (as a real model at temperature 0
    continues its own tokens). A text that is not the reply's start is continued by the whole reply."""
    units = [Unit("reasoning", t) for t in tokenizer.tokenize(reply.reasoning)]
    text, stop_reason = reply.text, None
    cut = len(text) + 1
    for s in stop:
        at = text.find(s) if s else -1
        if 0 <= at < cut:
            cut, stop_reason = at, s
    if stop_reason is not None:
        text = text[:cut]
    units += [Unit("content", t) for t in tokenizer.tokenize(text)]
    if skip:
        units = _after(units, skip)
    calls = reply.tool_calls if tools_allowed and stop_reason is None else []
    for i, call in enumerate(calls):
        units.append(Unit("tool_head", call["name"], i))
        units += [Unit("tool_args", t, i) for t in tokenizer.tokenize(call["arguments"])]
    if len(units) > max_tokens:
        units, finish = units[:max_tokens], "length"
    elif len(units) == max_tokens and stop_reason is None and not calls:
        finish = "length"  # the limit was reached before the reply ended, as vLLM reports it
    else:
        finish = "tool_calls" if calls else "stop"
    return Reply(units, finish, stop_reason, calls)


def _after(units: list[Unit], begun: str) -> list[Unit]:
    """The units after those whose text is ``begun``; all of them when ``begun`` is not their
    start at a unit's boundary."""
    text = ""
    for k, u in enumerate(units):
        if text == begun:
            return units[k:]
        if u.kind != "content" or not begun.startswith(text + u.text):
            return units
        text += u.text
    return [] if text == begun else units


class Encoder(Protocol):
    """One answer's bytes in one API's shape (chat, completions, the Responses API)."""

    def role_chunk(self) -> bytes: ...
    def unit_chunks(self) -> list[bytes]: ...
    def tail(self, prompt: int, completion: int, include_usage: bool) -> bytes: ...
    def body(self, prompt: int) -> dict[str, Any]: ...


class ChatEncoder:
    """Encodes one chat answer: stream chunks, or the whole body."""

    def __init__(self, model: str, reply: Reply) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.reply = reply
        head = f'data: {{"id":"{self.id}","object":"chat.completion.chunk","created":{self.created},"model":{_j(model)},"choices":[{{"index":0,"delta":'
        self._head = head.encode()
        self._tail = b',"logprobs":null,"finish_reason":null}]}\n\n'

    def role_chunk(self) -> bytes:
        return self._head + b'{"role":"assistant","content":""}' + self._tail

    def _delta(self, u: Unit) -> dict[str, Any]:
        if u.kind == "content":
            return {"content": u.text}
        if u.kind == "reasoning":
            return {"reasoning_content": u.text}
        call = self.reply.tool_calls[u.call]
        if u.kind == "tool_head":
            piece = {"index": u.call, "id": call["id"], "type": "function", "function": {"name": u.text}}
        else:
            piece = {"index": u.call, "function": {"arguments": u.text}}
        return {"tool_calls": [piece]}

    def unit_chunks(self) -> list[bytes]:
        """One chunk per unit; the last carries the finish reason, as vLLM's does."""
        cache: dict[tuple[str, str], bytes] = {}
        out = []
        for u in self.reply.units:
            if u.kind in ("content", "reasoning"):
                key = (u.kind, u.text)
                b = cache.get(key)
                if b is None:
                    b = cache[key] = self._head + _j(self._delta(u)).encode() + self._tail
                out.append(b)
            else:
                out.append(self._head + _j(self._delta(u)).encode() + self._tail)
        final = self.final_suffix()
        if out:
            out[-1] = out[-1][: -len(self._tail)] + final
        else:
            out.append(self._head + b'{"content":""}' + final)
        return out

    def final_suffix(self) -> bytes:
        r = self.reply
        return (
            f',"logprobs":null,"finish_reason":"{r.finish_reason}","stop_reason":{_j(r.stop_reason)}}}]}}\n\n'
        ).encode()

    def usage_chunk(self, prompt: int, completion: int) -> bytes:
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": _usage(prompt, completion),
        }
        return b"data: " + _j(body).encode() + b"\n\n"

    def tail(self, prompt: int, completion: int, include_usage: bool) -> bytes:
        """What follows the last token: the usage chunk when asked for, then ``[DONE]``."""
        return (self.usage_chunk(prompt, completion) if include_usage else b"") + DONE

    def body(self, prompt: int) -> dict[str, Any]:
        r = self.reply
        text = "".join(u.text for u in r.units if u.kind == "content")
        reasoning = "".join(u.text for u in r.units if u.kind == "reasoning")
        calls: list[dict[str, Any]] = []
        for u in r.units:
            if u.kind == "tool_head":
                calls.append(
                    {
                        "id": r.tool_calls[u.call]["id"],
                        "type": "function",
                        "function": {"name": u.text, "arguments": ""},
                    }
                )
            elif u.kind == "tool_args":
                calls[-1]["function"]["arguments"] += u.text
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text if (text or not calls) else None,
            "reasoning_content": reasoning or None,
            "tool_calls": calls,
        }
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": r.finish_reason,
                    "stop_reason": r.stop_reason,
                }
            ],
            "usage": _usage(prompt, len(r.units)),
            "prompt_logprobs": None,
        }


class CompletionEncoder:
    """Encodes one /v1/completions answer (no role chunk, ``text`` pieces)."""

    def __init__(self, model: str, reply: Reply) -> None:
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.reply = reply
        head = f'data: {{"id":"{self.id}","object":"text_completion","created":{self.created},"model":{_j(model)},"choices":[{{"index":0,"text":'
        self._head = head.encode()
        self._tail = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'

    def role_chunk(self) -> bytes:
        return b""

    def unit_chunks(self) -> list[bytes]:
        cache: dict[str, bytes] = {}
        out = []
        for u in self.reply.units:
            b = cache.get(u.text)
            if b is None:
                b = cache[u.text] = self._head + _j(u.text).encode() + self._tail
            out.append(b)
        r = self.reply
        final = (
            f',"logprobs":null,"finish_reason":"{r.finish_reason}","stop_reason":{_j(r.stop_reason)}}}]}}\n\n'
        )
        if out:
            out[-1] = out[-1][: -len(self._tail)] + final.encode()
        else:
            out.append(self._head + b'""' + final.encode())
        return out

    def usage_chunk(self, prompt: int, completion: int) -> bytes:
        body = {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": _usage(prompt, completion),
        }
        return b"data: " + _j(body).encode() + b"\n\n"

    def tail(self, prompt: int, completion: int, include_usage: bool) -> bytes:
        """What follows the last token: the usage chunk when asked for, then ``[DONE]``."""
        return (self.usage_chunk(prompt, completion) if include_usage else b"") + DONE

    def body(self, prompt: int) -> dict[str, Any]:
        r = self.reply
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "text": "".join(u.text for u in r.units),
                    "logprobs": None,
                    "finish_reason": r.finish_reason,
                    "stop_reason": r.stop_reason,
                    "prompt_logprobs": None,
                }
            ],
            "usage": _usage(prompt, len(r.units)),
        }


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
    }
