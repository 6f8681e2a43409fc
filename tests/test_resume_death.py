"""An engine that dies costs its clients nothing: vLLM's ``EngineDeadError`` as the simulator plays
it (``engine_death``, sim/death.py: every stream in flight gets the engine's error, a Responses
stream its connection cut, ``/health`` answers 503 and new requests 500, then the process exits),
and every request in flight is held and resumed on the next life exactly as a stalled one is. The
proxy asks ``/health`` whose failure it was (proxy/resume/blame.py): a request's own error event on
a server that goes on serving reaches its client unchanged, at once. A request that kills every
engine it meets is a suspect after ``max_resumes``. Real simulator subprocesses behind the real
stack, real sockets, real SQLite; the simulator's replies are deterministic, so each resumed
answer is held to the answer of a request no death touched."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import openai

from conftest import read_cut, sse_events
from wedgewatch.base import vocab
from wedgewatch.config import ServerConfig, WarmupConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.stack.servers import Stack
from wedgewatch.testing import eventually_async

STORY = "write a long story about a lighthouse"
DIES = "ENGINE-DIES: write a short story about a lighthouse"
OWN = "OWN-ERROR: write a short story about a lighthouse"


def _scenario(tmp_path: Path, once: bool = True, unready: float = 0.0) -> Path:
    marker = f'marker = "{tmp_path / "struck"}"\n' if once else ""
    text = (
        f"[startup]\nunready_seconds = {unready}\n\n"
        '[[fault]]\nwhen.contains = "ENGINE-DIES"\naction = "engine_death"\nafter_tokens = 7\n'
        f"exit_code = 0\nexit_delay = 2.0\n{marker}\n"
        '[[fault]]\nwhen.contains = "OWN-ERROR"\naction = "error_event"\nafter_tokens = 5\n'
    )
    (tmp_path / "scenario.toml").write_text(text)
    return tmp_path / "scenario.toml"


@asynccontextmanager
async def _stack(
    tmp_path: Path, once: bool = True, unready: float = 0.0, **watchdog: Any
) -> AsyncIterator[tuple[Stack, Ledger]]:
    ledger = Ledger(tmp_path / "l.sqlite")
    server = ServerConfig(
        profile="sim",
        scenario=str(_scenario(tmp_path, once, unready)),
        log_dir=str(tmp_path / "logs"),
        scrape_interval=0.2,
        heartbeat_window=1.0,
        restart_backoff=0.1,
        warmup=WarmupConfig(count=1, max_tokens=2),
    )
    async with Stack(server, WatchdogConfig(**watchdog), ledger=ledger) as stack:
        yield stack, ledger


def _rows(ledger: Ledger) -> list[dict[str, Any]]:
    return [dict(r) for r in ledger.query("SELECT * FROM requests ORDER BY started_at")]


def _detail(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(row["detail_json"])
    return out


BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": (
        "/v1/chat/completions",
        {"stream": True, "max_tokens": 120, "stream_options": {"include_usage": True}},
    ),
    "once": ("/v1/chat/completions", {"stream": False, "max_tokens": 120}),
    "messages": ("/v1/messages", {"stream": True, "max_tokens": 120}),
    "responses": ("/v1/responses", {"stream": True, "max_output_tokens": 120}),
}


def _body(api: str, text: str) -> tuple[str, dict[str, Any]]:
    path, extra = BODIES[api]
    said: dict[str, Any] = (
        {"input": text} if api == "responses" else {"messages": [{"role": "user", "content": text}]}
    )
    return path, {"model": "sim-model", **said, **extra}


async def _ask(url: str, api: str, text: str) -> tuple[int, bytes, bool]:
    """Status, the body as far as it came, and whether it was cut short."""
    path, body = _body(api, text)
    async with aiohttp.ClientSession() as s, s.post(url + path, json=body) as r:
        raw, cut = await read_cut(r)
        return r.status, raw, cut


def _said(api: str, raw: bytes) -> str:
    """The reply's text as the client reads it."""
    if api == "once":
        return str(json.loads(raw)["choices"][0]["message"]["content"])
    events = sse_events(raw)
    if api == "chat":
        return "".join(e["choices"][0]["delta"].get("content") or "" for _, e in events if e.get("choices"))
    if api == "messages":
        return "".join(e["delta"].get("text") or "" for k, e in events if k == "content_block_delta")
    return "".join(e["delta"] for k, e in events if k == "response.output_text.delta")


async def _in_flight(stack: Stack, n: int) -> None:
    url = stack.supervisor.base_url

    async def count() -> bool:
        async with httpx.AsyncClient() as c:
            return int((await c.get(url + "/sim/stats")).json()["in_flight"]) >= n

    await eventually_async(count, 60, what=f"{n} requests in flight")


async def test_an_engine_death_holds_every_request_in_flight_and_resumes_each(tmp_path: Path) -> None:
    async with _stack(tmp_path) as (stack, ledger):
        first = stack.supervisor.life_id
        bystanders = {api: asyncio.ensure_future(_ask(stack.url, api, STORY)) for api in BODIES}
        await _in_flight(stack, len(BODIES))
        struck = await _ask(stack.url, "chat", DIES)
        got = {api: await t for api, t in bystanders.items()}
        got["struck"] = struck
        # The same requests again, on the next life, untouched: the answers to match.
        clean = {api: await _ask(stack.url, api, STORY) for api in BODIES}
        clean["struck"] = await _ask(stack.url, "chat", DIES)
        lives = [dict(r) for r in ledger.query("SELECT * FROM server_life_view ORDER BY started_at")]
    for api, (status, raw, cut) in got.items():
        kind = "chat" if api == "struck" else api
        assert status == 200 and not cut, (api, raw[-300:])
        assert _said(kind, raw) == _said(kind, clean[api][1]) and len(_said(kind, raw)) > 20, api
    chat = sse_events(got["chat"][1])
    assert len({e["id"] for _, e in chat}) == 1 and got["chat"][1].count(b"data: [DONE]") == 1
    # The text route's usage: the completion tokens summed over the legs (docs/proxy.md).
    assert (
        chat[-1][1]["usage"]["completion_tokens"]
        == sse_events(clean["chat"][1])[-1][1]["usage"]["completion_tokens"]
    )
    responses = [e for _, e in sse_events(got["responses"][1])]
    assert [e["sequence_number"] for e in responses] == list(range(len(responses)))

    assert lives[0]["life_id"] == first and lives[0]["end_reason"] in (vocab.CRASH, vocab.WEDGE)
    rows = _rows(ledger)
    resumed = [r for r in rows if r["outcome"] == vocab.RESUMED]
    assert len(resumed) == len(BODIES) + 1 and {r["life_id"] for r in resumed} == {first}
    assert {_detail(r)["blame"] for r in resumed} == {vocab.ENGINE_DEATH}, [_detail(r) for r in resumed]
    causes = {_detail(r)["cause"] for r in resumed}
    # Chat and Messages streams get the engine's error event, a Responses stream is cut.
    assert vocab.STREAM_ERROR_EVENT in causes and vocab.CONNECTION in causes, causes
    assert not [r for r in rows if vocab.is_infra_outcome(r["outcome"])]
    # The proxy asked the supervisor for its verdict at once: a canary on the dying life.
    canaries = [
        json.loads(r["detail_json"])
        for r in ledger.query("SELECT * FROM events WHERE kind = ? AND life_id = ?", (vocab.CANARY, first))
    ]
    assert any(c["trigger"].get("event") == "life_in_doubt" for c in canaries), canaries


async def test_a_requests_own_error_event_reaches_its_client_unchanged_at_once(tmp_path: Path) -> None:
    """The server goes on serving (its /health answers 200): the error event the client reads is
    the server's, byte for byte, and no verdict is waited for (``verdict_wait`` an hour)."""
    async with _stack(tmp_path, verdict_wait=3600.0) as (stack, ledger):
        first = stack.supervisor.life_id
        status, raw, cut = await _ask(stack.url, "chat", OWN)
        _, direct, _ = await _ask(stack.supervisor.base_url, "chat", OWN)
        after = stack.supervisor.life_id
    assert status == 200 and cut
    tail = raw[raw.rindex(b"data: {") :]
    assert tail == direct[direct.rindex(b"data: {") :]  # the error object and [DONE], as sent
    assert b'"code":500' in tail and tail.endswith(b"data: [DONE]\n\n")
    assert after == first
    [row] = [r for r in _rows(ledger) if r["client_stream"]]
    assert row["outcome"] == vocab.STREAM_ERROR_EVENT and row["http_status"] == 200
    assert _detail(row)["blame"] == vocab.OWN_ERROR and "200" in _detail(row)["blame_why"]


async def test_a_request_that_kills_every_engine_it_meets_is_a_suspect(tmp_path: Path) -> None:
    async with _stack(tmp_path, once=False) as (stack, ledger):
        status, raw, _ = await _ask(stack.url, "once", DIES)
    assert status == 500, raw
    rows = _rows(ledger)
    # A request without a stream goes upstream as sent: the dying engine answers it HTTP 500.
    assert [r["outcome"] for r in rows[:2]] == [vocab.RESUMED, vocab.upstream_http(500)]
    last = _detail(rows[1])
    assert last["suspect"] is True and "max_resumes" in last["not_resumed"]
    assert last["blame"] == vocab.ENGINE_DEATH


async def test_with_on_wedge_fail_an_engine_death_fails_as_before(tmp_path: Path) -> None:
    async with _stack(tmp_path, on_wedge="fail") as (stack, ledger):
        status, raw, cut = await _ask(stack.url, "chat", DIES)
    assert status == 200 and cut
    assert b"EngineCore encountered an issue" in raw
    [row] = [r for r in _rows(ledger) if r["client_stream"]]
    assert row["outcome"] == vocab.STREAM_ERROR_EVENT and "blame" not in _detail(row)


async def test_a_held_stream_is_kept_alive_through_a_restart_longer_than_its_clients_timeout(
    tmp_path: Path,
) -> None:
    """Each life answers /health 503 for its first 4 s: the restart outlasts the OpenAI SDK's
    2 s timeout. A held stream gets a comment every 0.5 s, so the SDK's stream reads the whole
    reply; a request without a stream (the one whose engine died under it) has no headers to keep
    alive: the SDK gives up on it, retries (its default), and a retry is served by the next life,
    the abandoned attempts dropped (``client_disconnect``)."""
    async with _stack(tmp_path, unready=4.0, keepalive_interval=0.5) as (stack, ledger):
        client = openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key="x", timeout=2.0, max_retries=10)
        story = [{"role": "user", "content": STORY}]
        dies = [{"role": "user", "content": DIES}]

        async def read() -> str:
            stream = await client.chat.completions.create(
                model="sim-model",
                messages=story,
                max_tokens=60,
                stream=True,  # type: ignore[arg-type]
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

        sdk = asyncio.ensure_future(read())
        raw = asyncio.ensure_future(_ask(stack.url, "chat", STORY))
        await _in_flight(stack, 2)
        once = await client.chat.completions.create(model="sim-model", messages=dies, max_tokens=40)  # type: ignore[arg-type]
        text = await sdk
        status, body, cut = await raw
        clean = await client.chat.completions.create(model="sim-model", messages=story, max_tokens=60)  # type: ignore[arg-type]
        clean_story = await _ask(stack.url, "chat", STORY)
        clean_once = await client.chat.completions.create(model="sim-model", messages=dies, max_tokens=40)  # type: ignore[arg-type]
    assert text == clean.choices[0].message.content and len(text) > 20
    assert status == 200 and not cut and _said("chat", body) == _said("chat", clean_story[1])
    assert b": wedgewatch: held for the next server life\n\n" in body
    assert once.choices[0].message.content == clean_once.choices[0].message.content
    rows = _rows(ledger)
    kept = [_detail(r).get("keepalives", 0) for r in rows if r["client_stream"] and r["outcome"] == vocab.OK]
    assert max(kept) >= 2, kept
    abandoned = [r for r in rows if not r["client_stream"] and r["outcome"] == vocab.CLIENT_DISCONNECT]
    assert abandoned, "\n".join(f"{r['outcome']} {r['client_stream']} {r['detail_json'][:300]}" for r in rows)
