"""A begun Responses or Messages stream continued from token ids on vLLM, sampled or not.

A chat stream is continued from the ids the server generated (``token_ids.py``). The Responses
and Messages APIs return no ids, but vLLM renders both through its chat template, as it renders a
chat, and says so: ``/v1/responses/render`` and ``/v1/messages/render`` (vLLM 0.32, served with
``--enable-scale-out``) answer the exact prompt ids and the sampling parameters, defaults applied,
that the request would have been generated from, and ``/inference/v1/generate`` generates from ids
with those parameters. So the next life is asked to render the client's request, the text the
client has read is read back as ids (``/tokenize``, no special tokens), and the continuation is
generated from the prompt's ids and those, with the token budget less them; its text is re-encoded
as the client's own events under its ids (``reencode.py``). Any temperature: nothing is generated
twice, so a sampled reply is continued, not replayed.

Where it is not exact:

- the relayed text's ids are the tokenizer's reading of it, which is the model's own unless the
  model sampled a split of a word the tokenizer would not make (the text, and so what the client
  reads, is the same either way; ``docs/proxy.md`` gives the measured rate);
- ``frequency_penalty`` and ``presence_penalty``: vLLM counts a reply's output tokens only, and the
  ids moved into the continuation's prompt would go unpenalised; ``seed``: its random state cannot
  be restored (a replay with the seed is the seeded reply); structured outputs: the grammar would
  start again at the continuation instead of resuming in its state (``inexact``: these are
  replayed, as on any server);
- only a reply that is text so far (one message item, one ``output_text`` part; one text block) is
  read back: reasoning, a tool call or a refusal begun is replayed (its raw text is the model's
  markup, which the events do not show).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from wedgewatch.proxy.dialects.kind import Kind

RENDER = {"responses": "/v1/responses/render", "messages": "/v1/messages/render"}
GENERATE = "/inference/v1/generate"
"""Where a typed continuation goes: vLLM's token-in endpoint, which takes the render's parameters."""
_WITHIN = 30.0  # seconds for the next life to render and tokenize (milliseconds on vLLM)
_STRUCTURED = frozenset({"json_schema", "json_object", "structural_tag", "grammar", "regex"})


def inexact(kind: Kind, body: Mapping[str, Any]) -> str | None:
    """Why no continuation (from ids or text) is the reply an uninterrupted request gives, or None:
    then the request is replayed instead (``chat_replay.py``, ``replay.py``)."""
    if _structured(kind, body):
        return (
            "structured outputs: the grammar would start again at the continuation, not resume in its state"
        )
    for key in ("frequency_penalty", "presence_penalty"):
        if body.get(key):
            return f"{key}: vLLM counts a reply's output tokens only, and those moved into the continuation's prompt would go unpenalised"
    if body.get("seed") is not None:
        return "a seed: its random state cannot be restored (a replay with the seed is the seeded reply)"
    return None


def _structured(kind: Kind, body: Mapping[str, Any]) -> bool:
    if any(
        body.get(k)
        for k in ("structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar")
    ):
        return True
    if kind == "responses":
        text = body.get("text")
        fmt = text.get("format") if isinstance(text, dict) else None
    elif kind == "messages":
        config = body.get("output_config")
        fmt = config.get("format") if isinstance(config, dict) else body.get("output_format")
    else:
        fmt = body.get("response_format")
    return isinstance(fmt, dict) and fmt.get("type") in _STRUCTURED


@dataclass
class Begun:
    """What a streaming client has received of a Responses or Messages reply, read back from the
    events the proxy forwarded: where its text stands and the ids it knows it by."""

    kind: Kind
    text: str = ""
    blocker: str | None = None  # why it is not text alone so far
    last_seq: int | None = None  # Responses: the last sequence_number the client got
    response: dict[str, Any] = field(default_factory=dict)  # Responses: the response as created
    item: dict[str, Any] = field(default_factory=dict)  # Responses: the open message item
    output_index: int = 0
    content_index: int = 0
    message: dict[str, Any] = field(default_factory=dict)  # Messages: message_start's message
    index: int = 0  # Messages: the open text block's index
    opened: bool = False  # the text's item and part (block) were opened
    prompt_tokens: int = 0  # set by ``prepare``: the rendered prompt's length
    text_tokens: int = 0  # set by ``prepare``: the ids the text reads back as

    @classmethod
    def read(cls, kind: Kind, sent: list[bytes]) -> Begun:
        out = cls(kind)
        for data in sent:
            try:
                obj = json.loads(data)
            except ValueError:
                continue
            if isinstance(obj, dict) and out.blocker is None:
                (out._responses if kind == "responses" else out._messages)(obj)
        if out.blocker is None and not (out.opened and out.text):
            out.blocker = "no text was relayed yet"
        return out

    def _responses(self, obj: dict[str, Any]) -> None:
        kind = str(obj.get("type"))
        if isinstance(obj.get("sequence_number"), int):
            self.last_seq = obj["sequence_number"]
        if kind in ("response.created", "response.in_progress") and isinstance(obj.get("response"), dict):
            self.response = obj["response"]
        elif kind == "response.output_item.added":
            item = obj.get("item")
            if self.opened or not isinstance(item, dict) or item.get("type") != "message":
                self.blocker = "a reply that is not one message (reasoning, a tool call) was begun"
            else:
                self.item, self.output_index = item, int(obj.get("output_index") or 0)
        elif kind == "response.content_part.added":
            part = obj.get("part")
            if not self.item or not isinstance(part, dict) or part.get("type") != "output_text":
                self.blocker = "a part that is not output text was begun"
            else:
                self.opened, self.content_index = True, int(obj.get("content_index") or 0)
        elif kind == "response.output_text.delta" and self.opened:
            self.text += str(obj.get("delta") or "")
        elif kind.endswith(".done") or kind.startswith("response.reasoning") or ".refusal." in kind:
            self.blocker = f"{kind} came before the cut"

    def _messages(self, obj: dict[str, Any]) -> None:
        kind = str(obj.get("type"))
        if kind == "message_start" and isinstance(obj.get("message"), dict):
            self.message = obj["message"]
        elif kind == "content_block_start":
            block = obj.get("content_block")
            if self.opened or not isinstance(block, dict) or block.get("type") != "text":
                self.blocker = "a block that is not text (thinking, a tool call) was begun"
            else:
                self.opened, self.index = True, int(obj.get("index") or 0)
        elif kind == "content_block_delta" and self.opened:
            delta = obj.get("delta")
            if isinstance(delta, dict) and delta.get("type") == "text_delta":
                self.text += str(delta.get("text") or "")
            else:
                self.blocker = "a delta that is not text came"
        elif kind in ("content_block_stop", "message_delta", "message_stop"):
            self.blocker = f"{kind} came before the cut"


async def prepare(
    session: aiohttp.ClientSession,
    base_url: str,
    headers: Mapping[str, str],
    body: dict[str, Any],
    begun: Begun,
) -> dict[str, Any] | str:
    """The ``/inference/v1/generate`` body that continues ``begun`` on the life at ``base_url``, or
    why it cannot (the life does not render the API: vLLM without ``--enable-scale-out``, another
    server; a render or tokenize that failed)."""
    path = RENDER[begun.kind]
    rendered = await _post(session, base_url + path, headers, {**body, "stream": True})
    if not isinstance(rendered, dict) or not isinstance(rendered.get("token_ids"), list):
        return f"the next life did not render the request ({path}: {rendered})"
    said = await _post(
        session,
        base_url + "/tokenize",
        headers,
        {"model": body.get("model"), "prompt": begun.text, "add_special_tokens": False},
    )
    ids = said.get("tokens") if isinstance(said, dict) else None
    params = rendered.get("sampling_params")
    if not isinstance(ids, list) or not ids or not isinstance(params, dict):
        return f"the next life did not read the relayed text back as ids (/tokenize: {said})"
    begun.prompt_tokens, begun.text_tokens = len(rendered["token_ids"]), len(ids)
    params = dict(params)
    if isinstance(params.get("max_tokens"), int):
        params["max_tokens"] = max(1, params["max_tokens"] - len(ids))
    if isinstance(params.get("min_tokens"), int):
        params["min_tokens"] = max(0, params["min_tokens"] - len(ids))
    out = {
        k: v
        for k, v in rendered.items()
        if k not in ("token_ids", "sampling_params", "request_id", "token_offsets")
    }
    out.update(
        token_ids=[*rendered["token_ids"], *ids],
        sampling_params=params,
        stream=True,
        output_mode="text",
        stream_options={"include_usage": True},
    )
    return out


async def _post(
    session: aiohttp.ClientSession, url: str, headers: Mapping[str, str], body: dict[str, Any]
) -> Any:
    """The JSON answer, or a short string saying what came instead."""
    try:
        async with asyncio.timeout(_WITHIN), session.post(url, json=body, headers=headers) as resp:
            if resp.status != 200:
                return f"HTTP {resp.status}"
            return await resp.json(content_type=None)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
        return type(exc).__name__
