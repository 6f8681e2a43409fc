"""The simulator's own side of the fault corpus (docs/faults.md), asked directly, without the proxy:
each broken reply in the shape of the API asked for, streaming or not; a livelock whose heartbeat
moves while no token comes; llama.cpp's /slots, which a wedge leaves unanswered. What the proxy
and the supervisor make of them is tests/test_fault_corpus.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from conftest import RunningServer
from wedgewatch.testing import eventually_async
from wedgewatch.wire import promtext


def _chat(word: str, stream: bool) -> dict[str, Any]:
    return {
        "model": "sim-model",
        "messages": [{"role": "user", "content": word}],
        "max_tokens": 8,
        "stream": stream,
    }


async def _post(
    s: aiohttp.ClientSession, url: str, body: dict[str, Any], path: str = "/v1/chat/completions"
) -> tuple[int, str, bytes]:
    async with s.post(url + path, json=body) as r:
        return r.status, r.headers.get("Content-Type", ""), await r.read()


@pytest.fixture
def broken(start_sim: Callable[..., RunningServer]) -> RunningServer:
    return start_sim("--scenario", "broken-replies")


async def test_each_broken_reply_has_the_shape_of_the_api_asked_for(broken: RunningServer) -> None:
    async with aiohttp.ClientSession() as s:
        status, ctype, body = await _post(s, broken.url, _chat("HTML-200", True))
        assert (status, ctype.split(";")[0]) == (200, "text/html") and body.startswith(b"<html>")

        status, _, body = await _post(s, broken.url, _chat("NOT-JSON", True))
        lines = [ln for ln in body.split(b"\n") if ln.startswith(b"data: ")]
        assert status == 200 and lines[-2].startswith(b"data: <html>") and lines[-1] == b"data: [DONE]"

        status, _, body = await _post(s, broken.url, _chat("ERROR-EVENT", True))
        last = json.loads([ln for ln in body.split(b"\n") if ln.startswith(b"data: {")][-1][6:])
        assert status == 200 and last["error"]["code"] == 500 and body.endswith(b"data: [DONE]\n\n")

        status, _, body = await _post(s, broken.url, _chat("UNFINISHED", True))
        assert status == 200 and b"[DONE]" not in body and b'"finish_reason":"' not in body

        # The Messages and Responses APIs get the error as an `event: error` of their own.
        msg = {"model": "sim-model", "max_tokens": 8, "stream": True}
        _, _, body = await _post(
            s, broken.url, {**msg, "messages": [{"role": "user", "content": "ERROR-EVENT"}]}, "/v1/messages"
        )
        assert b"event: error\ndata: " in body and b"message_stop" not in body
        _, _, body = await _post(
            s, broken.url, {**msg, "input": "ERROR-EVENT", "max_output_tokens": 8}, "/v1/responses"
        )
        assert b"event: error\ndata: " in body and b"response.completed" not in body


async def test_a_non_streaming_request_gets_each_broken_reply_too(broken: RunningServer) -> None:
    async with aiohttp.ClientSession() as s:
        assert (await _post(s, broken.url, _chat("ERROR-EVENT", False)))[0] == 500
        for word in ("NOT-JSON", "UNFINISHED"):
            status, _, body = await _post(s, broken.url, _chat(word, False))
            with pytest.raises(ValueError):
                json.loads(body)
            assert status == 200, word
        async with s.post(broken.url + "/v1/chat/completions", json=_chat("ENDLESS-LINE", False)) as r:
            head = await r.content.readexactly(4 << 20)  # far more than any answer, and no end
        assert head.startswith(b'{"id": "xxxx') and b"\n" not in head
        async with s.get(broken.url + "/sim/stats") as r:
            stats = await r.json()
        # The three answered; the endless one is counted when its reader has gone.
        assert stats["broken"] >= 3 and stats["completed"] == 0


async def test_a_livelock_steps_on_and_delivers_nothing(start_sim: Callable[..., RunningServer]) -> None:
    sim = start_sim("--scenario", "livelock")
    async with aiohttp.ClientSession() as s:

        async def metrics() -> promtext.Samples:
            async with s.get(sim.url + "/metrics") as r:
                return promtext.parse(await r.text())

        async with s.post(sim.url + "/v1/chat/completions", json=_chat("LIVELOCK", True)) as stream:

            async def livelocked() -> bool:
                async with s.get(sim.url + "/sim/stats") as r:
                    return bool((await r.json())["livelocked"])

            await eventually_async(livelocked, what="the engine livelocked")
            before = await metrics()
            steps = before.total("vllm:iteration_tokens_total_count")
            await eventually_async(lambda: _moved(metrics, steps), what="the step counter moving on")
            after = await metrics()
            assert after.total("vllm:generation_tokens_total") == before.total("vllm:generation_tokens_total")
            async with s.get(sim.url + "/health") as r:
                assert r.status == 200
            stream.close()


async def _moved(metrics: Callable[[], Any], steps: float | None) -> bool:
    now = (await metrics()).total("vllm:iteration_tokens_total_count")
    return now is not None and steps is not None and now > steps


async def test_slots_answer_until_the_engine_wedges(start_sim: Callable[..., RunningServer]) -> None:
    sim = start_sim("--scenario", "wedge-slots-hang")
    async with aiohttp.ClientSession() as s:
        async with s.get(sim.url + "/slots") as r:
            slots = await r.json()
        assert r.status == 200 and slots[0] == {"id": 0, "n_ctx": 32768, "is_processing": False}
        async with s.post(sim.url + "/v1/chat/completions", json=_chat("WEDGE", True)) as stream:

            async def wedged() -> bool:
                async with s.get(sim.url + "/sim/stats") as r:
                    return bool((await r.json())["wedged"])

            await eventually_async(wedged, what="the engine wedged")
            with pytest.raises(TimeoutError):  # the subject: a request that is never answered
                async with asyncio.timeout(1.0), s.get(sim.url + "/slots") as r:
                    await r.read()
            stream.close()
