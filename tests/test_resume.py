"""A wedge costs the client nothing: requests in flight on a life the supervisor replaces are sent
again on the next one (``[watchdog] on_wedge = "resume"``, the default). A begun stream goes on
where it stopped, spliced into the client's stream (one id, one role chunk, one ``[DONE]``, the
usage summed); a request the client received nothing of is sent again whole. What cannot be
continued exactly fails as before, and its row says why. Real simulator subprocesses behind the
real stack, real sockets, real SQLite; the simulator's replies are deterministic, so the resumed
answer is held to the answer of a request no wedge touched."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from conftest import read_cut
from wedgewatch.config import ServerConfig, WarmupConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.stack.servers import Stack

PROMPT = "WEDGE: write a short story about a lighthouse"


def _scenario(tmp_path: Path, after: int, once: bool = True) -> Path:
    marker = f'marker = "{tmp_path / "struck"}"\n' if once else ""
    text = f'[[fault]]\nwhen.contains = "WEDGE"\naction = "wedge"\nafter_tokens = {after}\n{marker}'
    (tmp_path / "scenario.toml").write_text(text)
    return tmp_path / "scenario.toml"


@asynccontextmanager
async def _stack(tmp_path: Path, scenario: Path, **watchdog: Any) -> AsyncIterator[tuple[Stack, Ledger]]:
    ledger = Ledger(tmp_path / "l.sqlite")
    server = ServerConfig(
        profile="sim",
        scenario=str(scenario),
        log_dir=str(tmp_path / "logs"),
        scrape_interval=0.2,
        heartbeat_window=1.0,
        restart_backoff=0.1,
        warmup=WarmupConfig(count=1, max_tokens=2),
    )
    stack = Stack(server, WatchdogConfig(**watchdog), ledger=ledger)
    async with stack:  # the ledger stays open after the stack stops: the test reads its rows then
        yield stack, ledger


def _body(stream: bool, **extra: Any) -> dict[str, Any]:
    return {
        "model": "sim-model",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 60,
        "stream": stream,
        **extra,
    }


async def _stream(url: str, **extra: Any) -> tuple[int, list[dict[str, Any]], int]:
    """Status, the data chunks, and how many [DONE] lines the client read (a failed stream, cut
    short after its error event, has none)."""
    chunks: list[dict[str, Any]] = []
    done = 0
    async with (
        aiohttp.ClientSession() as s,
        s.post(url + "/v1/chat/completions", json=_body(True, **extra)) as r,
    ):
        raw, cut = await read_cut(r)
        for line in raw.split(b"\n"):
            if line.startswith(b"data: [DONE]"):
                done += 1
            elif line.startswith(b"data: "):
                chunks.append(json.loads(line[6:]))
        assert cut == (done == 0)
        return r.status, chunks, done


async def _once(url: str, **extra: Any) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(url + "/v1/chat/completions", json=_body(False, **extra)) as r,
    ):
        return r.status, await r.json()


def _text(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))


def _rows(ledger: Ledger) -> list[dict[str, Any]]:
    return [dict(r) for r in ledger.query("SELECT * FROM requests ORDER BY started_at")]


async def test_a_stream_wedged_midway_goes_on_on_the_next_life_as_one_stream(tmp_path: Path) -> None:
    async with _stack(tmp_path, _scenario(tmp_path, after=7)) as (stack, ledger):
        first = stack.supervisor.life_id
        status, chunks, done = await _stream(stack.url, stream_options={"include_usage": True})
        # The same request again, on the new life, untouched by any wedge: the answer to match.
        _, clean, _ = await _stream(stack.url, stream_options={"include_usage": True})
    assert status == 200 and done == 1
    assert _text(chunks) == _text(clean) and len(_text(clean)) > 20
    assert len({c["id"] for c in chunks}) == 1  # one id across both legs
    roles = [c for c in chunks if c.get("choices") and "role" in c["choices"][0]["delta"]]
    assert len(roles) == 1  # no second role chunk

    def finishes(cs: list[dict[str, Any]]) -> list[str]:
        return [
            c["choices"][0]["finish_reason"]
            for c in cs
            if c.get("choices") and c["choices"][0]["finish_reason"]
        ]

    assert finishes(chunks) == finishes(clean) and len(finishes(clean)) == 1
    assert chunks[-1]["usage"]["completion_tokens"] == clean[-1]["usage"]["completion_tokens"]
    rows = _rows(ledger)
    legs = [r for r in rows if r["life_id"] == first or json.loads(r["detail_json"]).get("resumes")]
    first_leg, second_leg = legs[0], legs[1]
    assert first_leg["outcome"] == "resumed" and first_leg["life_id"] == first
    detail = json.loads(first_leg["detail_json"])
    assert detail["resumed_as"] == second_leg["request_id"] and detail["cause"] in (
        "stall_midstream",
        "stall_ttft",
    )
    assert second_leg["outcome"] == "ok" and second_leg["life_id"] != first
    assert json.loads(second_leg["detail_json"])["resumes"] == first_leg["request_id"]
    assert first_leg["tokens_out"] == 7  # what the client had before the wedge


async def test_a_request_the_client_had_nothing_of_is_sent_again_whole(tmp_path: Path) -> None:
    async with _stack(tmp_path, _scenario(tmp_path, after=7)) as (stack, ledger):
        status, answer = await _once(stack.url)
        _, clean = await _once(stack.url)
    assert status == 200
    # The next life's own answer, passed on as it came: every field as a clean one's, ids aside.
    assert {**answer, "id": None, "created": None} == {**clean, "id": None, "created": None}
    assert answer["choices"][0]["message"]["content"]
    assert [r["outcome"] for r in _rows(ledger)][:2] == ["resumed", "ok"]


async def test_with_on_wedge_fail_the_request_fails_as_before(tmp_path: Path) -> None:
    async with _stack(tmp_path, _scenario(tmp_path, after=7), on_wedge="fail") as (stack, ledger):
        status, chunks, done = await _stream(stack.url)
    assert status == 200 and done == 0
    assert chunks[-1]["error"]["type"] == "upstream_stalled"
    assert _rows(ledger)[0]["outcome"] in ("stall_midstream", "stall_ttft")


async def test_a_request_that_wedges_every_life_is_a_suspect_not_retried_for_ever(tmp_path: Path) -> None:
    async with _stack(tmp_path, _scenario(tmp_path, after=7, once=False)) as (stack, ledger):
        status, _ = await _once(stack.url)
    assert status == 503
    rows = _rows(ledger)
    assert rows[0]["outcome"] == "resumed"
    last = json.loads(rows[1]["detail_json"])
    assert rows[1]["outcome"] in ("stall_midstream", "stall_ttft") and last["suspect"] is True
    assert "max_resumes" in last["not_resumed"]


# A tool call cut inside its arguments is replayed, not continued (tests/test_resume_replay.py).
@pytest.mark.parametrize(("extra", "why"), [({"logprobs": True}, "log probabilities")])
async def test_a_begun_stream_that_cannot_be_continued_exactly_fails_and_says_why(
    tmp_path: Path, extra: dict[str, Any], why: str
) -> None:
    async with _stack(tmp_path, _scenario(tmp_path, after=7)) as (stack, ledger):
        _, chunks, _ = await _stream(stack.url, **extra)
    rows = _rows(ledger)
    assert rows[0]["outcome"] in ("stall_midstream", "stall_ttft")
    assert why in json.loads(rows[0]["detail_json"])["not_resumed"]
    assert "error" in chunks[-1]
