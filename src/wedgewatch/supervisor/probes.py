"""What the supervisor asks a server over HTTP: /health, /v1/models, /metrics, a 1-token canary
and warm-up generations. Every call has a deadline and returns a result instead of raising:
a failed probe is data (it goes into the ledger), not an exception.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from wedgewatch.wire import promtext
from wedgewatch.wire.sse import SSEParser

CANARY_PROMPT = "Hi"


@dataclass(slots=True)
class ProbeResult:
    """One generation (canary or warm-up) and how it went."""

    ok: bool
    seconds: float
    ttft: float | None = None
    tokens: int = 0
    status: int | None = None
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seconds"] = round(self.seconds, 4)
        if self.ttft is not None:
            d["ttft"] = round(self.ttft, 4)
        return d


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "timeout"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


async def http_status(
    session: aiohttp.ClientSession, url: str, timeout: float, headers: dict[str, str] | None = None
) -> int | None:
    """The status of ``GET url``, or None when nothing answered in time."""
    try:
        async with asyncio.timeout(timeout), session.get(url, headers=headers) as resp:
            await resp.read()
            return resp.status
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


async def list_models(
    session: aiohttp.ClientSession, base_url: str, timeout: float, headers: dict[str, str] | None = None
) -> list[str] | None:
    """Model ids from /v1/models, or None when it did not answer with a model list."""
    try:
        async with asyncio.timeout(timeout), session.get(f"{base_url}/v1/models", headers=headers) as resp:
            if resp.status != 200:
                return None
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [str(m.get("id")) for m in data if isinstance(m, dict) and "id" in m]


async def scrape(
    session: aiohttp.ClientSession, base_url: str, timeout: float, headers: dict[str, str] | None = None
) -> tuple[promtext.Samples | None, str]:
    """One /metrics scrape: (samples, "") or (None, why not)."""
    try:
        async with asyncio.timeout(timeout), session.get(f"{base_url}/metrics", headers=headers) as resp:
            text = await resp.text()
            if resp.status != 200:
                return None, f"HTTP {resp.status}"
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return None, _describe(exc)
    try:
        return promtext.parse(text), ""
    except ValueError as exc:
        return None, f"unparsable metrics: {exc}"[:300]


async def generate(
    session: aiohttp.ClientSession,
    base_url: str,
    model: str,
    prompt: str,
    max_tokens: int,
    timeout: float,
    headers: dict[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> ProbeResult:
    """A streamed chat completion under one deadline. ok means the server finished the answer
    (a finish_reason or ``[DONE]``), whatever the text. ``extra`` is merged into the request's
    body (a warm-up of another kind: log probabilities, an adapter); with ``"stream": false`` in
    it the request asks for one answer (what some kinds need: vLLM's ``prompt_logprobs``)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **(extra or {}),
    }
    if body["stream"] is not True:
        body.pop("stream_options")
        return await _whole(session, f"{base_url}/v1/chat/completions", body, timeout, headers)
    t0 = time.monotonic()
    ttft: float | None = None
    tokens = 0
    usage_tokens: int | None = None
    finished = False
    status: int | None = None
    try:
        async with (
            asyncio.timeout(timeout),
            session.post(f"{base_url}/v1/chat/completions", json=body, headers=headers) as resp,
        ):
            status = resp.status
            if resp.status != 200:
                text = (await resp.text())[:300]
                return ProbeResult(
                    False, time.monotonic() - t0, status=status, error=f"HTTP {status}: {text}"
                )
            parser = SSEParser()
            async for chunk in resp.content.iter_any():
                for event in parser.feed(chunk):
                    if event.is_done:
                        finished = True
                        continue
                    if event.data is None:
                        continue
                    obj = json.loads(event.data)
                    if isinstance(obj, dict) and "error" in obj:
                        raise ValueError(f"error event: {str(obj['error'])[:200]}")
                    for choice in obj.get("choices") or ():
                        delta = choice.get("delta") or {}
                        if any(
                            delta.get(k) for k in ("content", "reasoning_content", "reasoning", "tool_calls")
                        ):
                            tokens += 1
                            if ttft is None:
                                ttft = time.monotonic() - t0
                        if choice.get("finish_reason"):
                            finished = True
                    usage = obj.get("usage")
                    if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                        usage_tokens = int(usage["completion_tokens"])
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        return ProbeResult(False, time.monotonic() - t0, ttft, tokens, status, _describe(exc))
    seconds = time.monotonic() - t0
    count = usage_tokens if usage_tokens is not None else tokens
    if not finished:
        return ProbeResult(False, seconds, ttft, count, status, "stream ended without a finish")
    return ProbeResult(True, seconds, ttft, count, status)


async def _whole(
    session: aiohttp.ClientSession,
    url: str,
    body: Mapping[str, Any],
    timeout: float,
    headers: dict[str, str] | None,
) -> ProbeResult:
    """One non-streaming chat completion: ok when the answer has a choice with a finish reason."""
    t0 = time.monotonic()
    status: int | None = None
    try:
        async with asyncio.timeout(timeout), session.post(url, json=body, headers=headers) as resp:
            status = resp.status
            text = await resp.text()
        if status != 200:
            return ProbeResult(
                False, time.monotonic() - t0, status=status, error=f"HTTP {status}: {text[:300]}"
            )
        answer = json.loads(text)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        return ProbeResult(False, time.monotonic() - t0, None, 0, status, _describe(exc))
    seconds = time.monotonic() - t0
    choices = answer.get("choices") if isinstance(answer, dict) else None
    usage = answer.get("usage") if isinstance(answer, dict) else None
    tokens = int(usage.get("completion_tokens") or 0) if isinstance(usage, dict) else 0
    if not choices or not all(isinstance(c, dict) and c.get("finish_reason") for c in choices):
        return ProbeResult(False, seconds, None, tokens, status, "an answer without a finish")
    return ProbeResult(True, seconds, None, tokens, status)


async def canary(
    session: aiohttp.ClientSession,
    base_url: str,
    model: str,
    timeout: float,
    path: str | None = None,
    headers: dict[str, str] | None = None,
) -> ProbeResult:
    """A 1-token generation under ``timeout``; or ``GET path`` where the server has its own
    generating health check (SGLang's /health_generate)."""
    if path is None:
        return await generate(session, base_url, model, CANARY_PROMPT, 1, timeout, headers)
    t0 = time.monotonic()
    status = await http_status(session, f"{base_url}{path}", timeout, headers)
    seconds = time.monotonic() - t0
    if status == 200:
        return ProbeResult(True, seconds, status=status)
    return ProbeResult(
        False, seconds, status=status, error="no answer" if status is None else f"HTTP {status}"
    )
