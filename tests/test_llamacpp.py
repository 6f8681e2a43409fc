"""The xllamacpp launcher against the real llama.cpp server and the real bundled Gemma 3 270M.

One server is shared by the module (loading takes about 1.5 s, but CPU is scarce); tests that
must watch a start or a stop run their own. Everything is a real subprocess on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import pytest

from conftest import RunningServer, launch
from wedgewatch.launchers.llamacpp import launch_argv
from wedgewatch.testing import eventually_async
from wedgewatch.wire import promtext
from wedgewatch.wire.sse import SSEParser

pytestmark = pytest.mark.xdist_group("llamacpp-server")  # one worker starts `llama` once

ALIAS = "gemma-test"
HELLO = [{"role": "user", "content": "Write hello world."}]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    argv = launch_argv(ctx_size=4096, parallel=2, threads=1, alias=ALIAS, sse_ping_interval=1)
    server = launch(argv, tmp_path_factory.mktemp("llama") / "llama.log", timeout=60)
    yield server
    server.stop()


@pytest.fixture
def client(llama: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=llama.v1, api_key="unused", max_retries=0, timeout=60)


async def scrape(session: aiohttp.ClientSession, url: str) -> promtext.Samples:
    async with session.get(url + "/metrics") as resp:
        assert resp.status == 200
        return promtext.parse(await resp.text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_models_and_metrics_are_llama_cpps(llama: RunningServer, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == [ALIAS]

    async def names() -> set[str]:
        async with aiohttp.ClientSession() as s:
            return (await scrape(s, llama.url)).names()

    found = asyncio.run(names())
    for series in ("requests_processing", "requests_deferred", "tokens_predicted_total", "n_decode_total"):
        assert f"llamacpp:{series}" in found


def test_temperature_zero_is_deterministic(client: openai.OpenAI) -> None:
    answers = [
        client.chat.completions.create(model=ALIAS, messages=HELLO, max_tokens=24, temperature=0)
        for _ in range(2)
    ]
    assert answers[0].choices[0].message.content == answers[1].choices[0].message.content
    assert answers[0].choices[0].message.content
    assert answers[0].usage is not None and answers[0].usage.completion_tokens == 24


def test_streaming_equals_non_streaming(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model=ALIAS, messages=HELLO, max_tokens=24, temperature=0)
    stream = client.chat.completions.create(
        model=ALIAS,
        messages=HELLO,
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts: list[str] = []
    finish: list[str] = []
    usage = None
    for chunk in stream:
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
            if choice.finish_reason:
                finish.append(choice.finish_reason)
        usage = chunk.usage or usage
    assert "".join(parts) == whole.choices[0].message.content
    assert finish == [whole.choices[0].finish_reason] == ["length"]
    assert usage is not None and whole.usage is not None
    assert usage.completion_tokens == whole.usage.completion_tokens == 24
    assert usage.prompt_tokens == whole.usage.prompt_tokens


async def test_decode_counter_is_live_and_predicted_counter_lands_at_the_end(llama: RunningServer) -> None:
    """`n_decode_total` rises while a request runs; `tokens_predicted_total` only when it ends.
    Liveness checks must watch the first."""
    # 60 tokens: after the 20th, about 2 s of decoding in which the scrapes (every 50 ms) see it run.
    body = {"model": ALIAS, "messages": HELLO, "max_tokens": 60, "temperature": 0}
    decode, predicted = "llamacpp:n_decode_total", "llamacpp:tokens_predicted_total"
    async with aiohttp.ClientSession() as s:
        before = await scrape(s, llama.url)
        task = asyncio.create_task(s.post(llama.v1 + "/chat/completions", json=body))

        async def twenty_decodes() -> promtext.Samples | None:
            now = await scrape(s, llama.url)
            return now if (now.total(decode) or 0) >= (before.total(decode) or 0) + 20 else None

        during = await eventually_async(twenty_decodes, timeout=30, what="20 decodes")
        resp = await task
        usage = (await resp.json())["usage"]
        after = await scrape(s, llama.url)
    assert during.total("llamacpp:requests_processing") == 1, "the request ended before 20 decodes"
    assert during.total(predicted) == before.total(predicted)
    assert after.total(predicted) == (before.total(predicted) or 0) + usage["completion_tokens"]


async def test_pings_are_comments_sent_during_a_long_prefill(llama: RunningServer) -> None:
    # About 1,000 prompt tokens: about 4 s of prefill at the module server's one thread, in which
    # it sends two pings here (the first after its 1 s interval, the next about 2 s later).
    prompt = " ".join(f"item{i}" for i in range(250))
    body = {
        "model": ALIAS,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
    }
    parser = SSEParser()
    pings_before_data = 0
    saw_data = False
    async with (
        aiohttp.ClientSession() as s,
        s.post(llama.v1 + "/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=60)) as resp,
    ):
        assert resp.status == 200
        async for chunk in resp.content.iter_any():
            for event in parser.feed(chunk):
                if event.data is None and event.comments and not saw_data:
                    pings_before_data += 1
                saw_data = saw_data or event.data is not None
    assert saw_data
    assert pings_before_data >= 1


async def test_client_disconnect_stops_generation(llama: RunningServer) -> None:
    body = {"model": ALIAS, "messages": HELLO, "max_tokens": 1500, "temperature": 0, "stream": True}
    async with aiohttp.ClientSession() as s:
        resp = await s.post(llama.v1 + "/chat/completions", json=body)
        parser, events = SSEParser(), 0
        async for chunk in resp.content.iter_any():
            events += sum(e.data is not None for e in parser.feed(chunk))
            if events >= 10:
                break
        resp.close()

        async def stopped() -> bool:
            return not (await scrape(s, llama.url)).total("llamacpp:requests_processing")

        await eventually_async(stopped, timeout=5, what="generation stopped after the disconnect")
        first = (await scrape(s, llama.url)).total("llamacpp:n_decode_total")
        await asyncio.sleep(1.0)  # a stopped counter must stay still: only time passing can show it
        second = await scrape(s, llama.url)
    assert second.total("llamacpp:n_decode_total") == first
    assert second.total("llamacpp:tokens_predicted_total") is not None
    assert (second.total("llamacpp:tokens_predicted_total") or 0) < 1500


def test_start_health_503_then_200_default_alias_and_sigterm_mid_stream(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "life.log"
    proc = subprocess.Popen(
        launch_argv(port=port, ctx_size=1024, parallel=1, threads=1),
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        start_new_session=True,
    )
    try:
        statuses = asyncio.run(_poll_health(f"http://127.0.0.1:{port}", until=200, within=60))
        assert 503 in statuses, statuses
        assert statuses.index(503) < statuses.index(200)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"listening on http://127.0.0.1:{port}"
        url = f"http://127.0.0.1:{port}"
        assert [m.id for m in openai.OpenAI(base_url=url + "/v1", api_key="x").models.list().data] == [
            "gemma3-270m"
        ]
        assert asyncio.run(_sigterm_mid_stream(url, proc))  # the stream ended, it did not hang
        assert proc.returncode == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def _poll_health(url: str, until: int, within: float) -> list[int]:
    statuses: list[int] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as s:

        async def answered() -> bool:
            try:
                async with s.get(url + "/health") as resp:
                    statuses.append(resp.status)
            except aiohttp.ClientConnectionError:
                pass
            return bool(statuses) and statuses[-1] == until

        await eventually_async(answered, timeout=within, interval=0.02, what=f"{until} from /health")
    return statuses


async def _sigterm_mid_stream(url: str, proc: subprocess.Popen[str]) -> bool:
    body = {"messages": HELLO, "max_tokens": 1000, "temperature": 0, "stream": True}
    async with aiohttp.ClientSession() as s:
        resp = await s.post(url + "/v1/chat/completions", json=body)
        async for _ in resp.content.iter_any():
            break
        proc.send_signal(signal.SIGTERM)
        ended = False
        try:
            async with asyncio.timeout(15):
                async for _ in resp.content.iter_any():
                    pass
            ended = True
        except aiohttp.ClientPayloadError:
            ended = True  # cut off mid-chunk: the client is told, it does not hang
        await asyncio.to_thread(proc.wait, 15)
        return ended


def _run_launcher(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch.launchers.llamacpp", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_bad_model_path_is_one_clear_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    done = _run_launcher("--model", str(missing))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--model" in lines[0] and str(missing) in lines[0]
    assert done.stdout == ""

    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("hello")
    done = _run_launcher("--model", str(not_gguf))
    assert done.returncode == 2
    assert "--model: not a GGUF file" in done.stderr.strip().splitlines()[-1]


def test_busy_port_is_one_clear_line() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = _run_launcher("--port", str(port))
    assert done.returncode == 2
    assert f"--port: 127.0.0.1:{port} is already in use" in done.stderr.strip().splitlines()[-1]


async def test_heartbeat_moves_during_a_long_prompt_and_a_sigstop_is_a_wedge_within_the_window(
    tmp_path: Path,
) -> None:
    """At default windows: ``n_decode_total`` counts prompt batches (so a long prompt is not flat),
    and a server frozen by SIGSTOP in the middle of one (not even /metrics answers) is a wedge,
    ``heartbeat_window`` or more after the last beat (how soon after, in real seconds, is
    `wedgewatch bench detection-llamacpp`'s to measure, not a wall-clock bound here)."""
    from wedgewatch.base.events import Wedged
    from wedgewatch.config import ServerConfig, WarmupConfig
    from wedgewatch.supervisor import Supervisor
    from wedgewatch.wire.heartbeat import Reading

    cfg = ServerConfig(
        profile="llamacpp",
        launcher="xllamacpp",
        model="gemma3-270m",
        args=["--parallel", "1", "--threads", "2", "--ctx-size", "4096"],
        log_dir=str(tmp_path / "logs"),
        warmup=WarmupConfig(count=1, max_tokens=4, timeout=60.0),
        startup_timeout=60.0,
        stop_grace=1.0,
        max_restarts=1,
        restart_on_wedge=False,
    )
    sup = Supervisor(cfg)
    seen: list[Reading] = []
    sup.feed.subscribe(lambda r, _life: seen.append(r), lambda *_: None)
    wedges: list[Wedged] = []
    sup.bus.subscribe(lambda ev: wedges.append(ev) if isinstance(ev, Wedged) else None)
    await sup.start()
    life = sup._life
    assert life is not None and sup.starter.heartbeat
    prompt = " ".join(f"item{i}" for i in range(700))  # about 2,800 tokens: many batches of 64
    body = {"model": "gemma3-270m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8}
    body["stream"] = True
    stopped = False
    try:
        async with aiohttp.ClientSession() as s:
            req = asyncio.ensure_future(s.post(sup.base_url + "/v1/chat/completions", json=body))
            start = len(seen)
            # two beats into the prompt, no token yet: freeze it
            await eventually_async(
                lambda: len({r.beat for r in seen[start:]}) >= 3, timeout=60, what="the prompt's beats"
            )
            during = seen[start:]
            assert {r.generated for r in during} == {during[0].generated}  # no token predicted yet
            assert not wedges
            os.kill(life.proc.pid, signal.SIGSTOP)
            stopped = True
            await eventually_async(lambda: wedges, timeout=30, what="a wedge after SIGSTOP")
            req.cancel()
    finally:
        if stopped:
            os.kill(life.proc.pid, signal.SIGCONT)
        await sup.stop()
    # Found with /metrics silent, at heartbeat_window or more after the last beat the scrapes saw.
    evidence = wedges[0].evidence
    assert evidence["rule"] == "heartbeat" and evidence.get("unreachable") is True, evidence
    assert evidence["flat_seconds"] >= cfg.heartbeat_window
