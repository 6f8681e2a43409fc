"""A request resumed on the next server life: what is sent there, and how its reply is spliced
into the stream the client already reads.

When the supervisor replaces a life (a wedge, a crash), the requests in flight on it would fail
and take their agents' attempts with them. With ``[watchdog] on_wedge = "resume"`` the proxy
sends each again instead (docs/proxy.md, "Resume"):

- a request the client has received nothing of (a non-streaming client, a stream before its
  first token) is sent again whole: the client cannot tell a resumed request from a slow one;
- a begun chat or completion stream is continued: the text already relayed is sent as the start
  of the reply (chat: a last assistant message, with ``continue_final_message`` where the server
  needs it; completions: the prompt plus the text), and the continuation's chunks go on in the
  client's stream under its first id, without a second role chunk, with the usage summed and one
  ``[DONE]``. Where the server returns the token ids it generated and takes ids as a prompt
  (vLLM), the continuation is given the ids instead, exactly (``token_ids.py``): a completion
  whose chunks become the client's, its usage the uninterrupted reply's.

What cannot be continued exactly fails as without resume, and the row says why: ``n`` > 1, log
probabilities, a tool call or reasoning begun, a server whose profile has no way to continue.
A begun Responses or Messages stream is not continued from its text but replayed: sent again
whole, its events swallowed up to what the client has (``replay.py``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from wedgewatch.proxy.dialects.chat_bytes import progress_of
from wedgewatch.proxy.dialects.kind import Kind
from wedgewatch.proxy.resume.token_ids import TOKEN_IDS, as_leg, completion_body, why_not
from wedgewatch.proxy.resume.typed_ids import inexact


@dataclass
class Relayed:
    """What a streaming client has received of one request, read back from the data payloads
    the proxy forwarded (kept undecoded while the stream is healthy: they are decoded only when
    a resume needs them)."""

    text: str = ""
    tokens: int = 0  # token-bearing chunks: the tokens already generated, as the watch counts them
    stream_id: str | None = None
    created: Any = None
    model: Any = None
    blocker: str | None = None  # why the text is not enough to continue
    # The token ids (vLLM's ``return_token_ids``; token_ids.py): the prompt's, from the stream's
    # first chunk, and those generated so far (None once a chunk with text came without its ids).
    kind: Kind = "chat"
    prompt_ids: list[int] | None = None
    token_ids: list[int] | None = field(default_factory=list)
    by_ids: bool = False  # continued from the ids (``continuation``): the next leg is a completion

    @classmethod
    def read(cls, kind: Kind, payloads: list[bytes], tokens: int) -> Relayed:
        out = cls(tokens=tokens, kind=kind)
        for data in payloads:
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if not isinstance(chunk, dict):
                continue
            if out.stream_id is None:
                out.stream_id, out.created, out.model = (
                    chunk.get("id"),
                    chunk.get("created"),
                    chunk.get("model"),
                )
            if out.prompt_ids is None and isinstance(chunk.get("prompt_token_ids"), list):
                out.prompt_ids = chunk["prompt_token_ids"]  # a chat stream's first chunk
            for choice in chunk.get("choices") or ():
                out._see(kind, choice)
                out._ids(choice)
        return out

    def _see(self, kind: Kind, choice: Any) -> None:
        if not isinstance(choice, dict):
            return
        if choice.get("index", 0) != 0:
            self.blocker = "several choices (n > 1)"
        if choice.get("logprobs"):
            self.blocker = "log probabilities were asked for"
        if kind == "completion":
            self.text += str(choice.get("text") or "")
            return
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        if delta.get("tool_calls"):
            self.blocker = "a tool call was begun (its arguments cannot be continued exactly)"
        if delta.get("reasoning_content") or delta.get("reasoning"):
            self.blocker = "reasoning text was begun"
        self.text += str(delta.get("content") or "")

    def _ids(self, choice: Any) -> None:
        if not isinstance(choice, dict):
            return
        if self.prompt_ids is None and isinstance(choice.get("prompt_token_ids"), list):
            self.prompt_ids = choice["prompt_token_ids"]  # a completion stream's first chunk
        ids = choice.get(TOKEN_IDS)
        if isinstance(ids, list):
            if self.token_ids is not None:
                self.token_ids += ids
        elif progress_of({"choices": [choice]}):
            self.token_ids = None  # text without its ids: the ids cannot say what was generated


def continuation(
    kind: Kind, body: dict[str, Any], relayed: Relayed, how: str | None
) -> tuple[dict[str, Any] | None, str]:
    """The body that continues a begun reply on the next life, or (None, why it cannot)."""
    if how is None:
        return None, "the server's profile has no way to continue a begun reply"
    if kind not in ("chat", "completion"):
        return None, f"a begun {kind} stream is replayed, not continued (replay.py)"
    if relayed.blocker is not None:
        return None, relayed.blocker
    why = inexact(kind, body)
    if why is not None:
        return None, why
    if not relayed.text:
        return None, "nothing but empty text was relayed"
    if (body.get("n") or 1) != 1:
        return None, "several choices (n > 1)"
    if body.get("logprobs"):
        return None, "log probabilities were asked for"
    if how == TOKEN_IDS and relayed.prompt_ids and relayed.token_ids and why_not(kind, body) is None:
        relayed.by_ids = True  # exact: the next leg is given the ids (token_ids.py)
        return completion_body(kind, body, relayed.prompt_ids, relayed.token_ids), ""
    out = copy.deepcopy(body)
    if kind == "chat":
        messages = out.get("messages")
        if not isinstance(messages, list):
            return None, "the request has no messages"
        out["messages"] = [*messages, {"role": "assistant", "content": relayed.text}]
        if how in ("continue", TOKEN_IDS):  # ids missing: their text, as on any vLLM
            out["continue_final_message"] = True
            out["add_generation_prompt"] = False
    else:
        prompt = out.get("prompt")
        if not isinstance(prompt, str):
            return None, "a completion prompt that is not one string"
        out["prompt"] = prompt + relayed.text
    for key in ("max_tokens", "max_completion_tokens"):
        if isinstance(out.get(key), int):
            out[key] = max(1, out[key] - relayed.tokens)
    return out, ""


@dataclass
class Splice:
    """The chunks of a continued leg, made part of the stream the client already reads: its id,
    creation time and model; no second role chunk; the usage with the tokens relayed before."""

    relayed: Relayed
    role_seen: bool = False
    dropped: list[bytes] = field(default_factory=list)
    departed: str | None = None  # a continuation is what the server makes of the text: never departs
    cause: tuple[str, str] = ("", "")

    def rewrite(self, data: bytes) -> bytes | None:
        """A chunk's data as the client gets it, or None to drop it (a role-only chunk)."""
        try:
            chunk = json.loads(data)
        except ValueError:
            return data  # the relay judges it
        if not isinstance(chunk, dict) or "error" in chunk:
            return data
        r = self.relayed
        if r.stream_id is not None:
            chunk["id"], chunk["created"], chunk["model"] = r.stream_id, r.created, r.model
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict) and "role" in delta:
                del delta["role"]  # the client had its role chunk from the first leg
                if (
                    not delta.get("content")
                    and not delta.get("tool_calls")
                    and choice.get("finish_reason") is None
                ):
                    return None
        usage = chunk.get("usage")
        if r.by_ids:  # a completion given the ids: made the client's chunk, its usage exact
            as_leg(chunk, r.kind, len(r.token_ids or ()))
        elif isinstance(usage, dict):
            for key in ("completion_tokens", "total_tokens"):
                if isinstance(usage.get(key), int):
                    usage[key] += r.tokens
        return json.dumps(chunk, separators=(",", ":"), ensure_ascii=False).encode()
