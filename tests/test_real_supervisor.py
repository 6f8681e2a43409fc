"""The supervisor and the proxy against the real llama.cpp server (xllamacpp launcher, bundled
Gemma 3 270M): a real freeze (SIGSTOP) is seen, the life is replaced, and the ledger says why;
a bad model path and a busy port fail with clear errors."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from wedgewatch.base.errors import PortBusyError, ServerError
from wedgewatch.base.events import EventBus
from wedgewatch.config import ServerConfig, WarmupConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.supervisor import Supervisor
from wedgewatch.testing import eventually_async

SERVED = "gemma-sup"
HELLO = [{"role": "user", "content": "Write hello world."}]
# ttft_timeout is short as well, so a freeze that lands before the first token is caught as soon.
WATCHDOG = WatchdogConfig(ttft_timeout=8, stall_timeout=3, min_rate=0, total_timeout=120)


def config(tmp_path: Path, **over: Any) -> ServerConfig:
    base: dict[str, Any] = {
        "profile": "llamacpp",
        "launcher": "xllamacpp",
        "model": "gemma3-270m",
        "served_model_name": SERVED,
        "args": ["--threads", "1", "--ctx-size", "2048", "--parallel", "2"],
        "log_dir": str(tmp_path / "logs"),
        "startup_timeout": 60,
        "scrape_interval": 0.5,
        "wedge_window": 4,
        "canary_timeout": 3,
        "stop_grace": 2,
        "restart_backoff": 0.2,
        "warmup": WarmupConfig(count=2, max_tokens=40, timeout=30),
    }
    return ServerConfig(**{**base, **over})


def detail(row: Any) -> dict[str, Any]:
    raw = row["detail_json"]
    return json.loads(raw) if isinstance(raw, str) else dict(raw or {})


@pytest.mark.long
async def test_real_freeze_is_a_wedge_and_the_life_is_replaced(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    bus = EventBus()
    sup = Supervisor(config(tmp_path), ledger=ledger, bus=bus)
    await sup.start()
    first = sup.life_id
    assert first is not None
    [life1] = ledger.query("SELECT pid FROM server_lives WHERE life_id = ?", (first,))
    pid = int(life1["pid"])
    detach = sup.attach(bus)
    proxy = Proxy(sup, WATCHDOG, ledger=ledger, bus=bus)
    await proxy.start()
    stopped_wall = 0.0
    try:
        client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0, timeout=60)
        stream = await client.chat.completions.create(
            model=SERVED, messages=HELLO, max_tokens=1500, temperature=0, stream=True
        )
        chunks = 0
        with pytest.raises(openai.APIError) as caught:
            async for _ in stream:
                chunks += 1
                if chunks == 5:
                    os.kill(pid, signal.SIGSTOP)
                    stopped_wall = time.time()
        assert isinstance(caught.value.body, dict) and caught.value.body.get("code") == "stall_midstream"

        async with asyncio.timeout(60):
            await eventually_async(lambda: sup.life_id not in (None, first), timeout=60, what="a new life")
            await sup.wait_ready()
        second = sup.life_id

        # The new life serves through the same proxy.
        again = await client.chat.completions.create(
            model=SERVED, messages=HELLO, max_tokens=4, temperature=0
        )
        assert again.usage is not None and again.usage.completion_tokens == 4
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        detach()
        await proxy.stop()
        await sup.stop()

    lives = {r["life_id"]: r for r in ledger.query("SELECT * FROM server_life_view ORDER BY started_at")}
    assert list(lives) == [first, second]
    assert lives[first]["end_reason"] == "wedge"
    assert lives[second]["start_reason"] == "wedge"
    assert lives[second]["ready_at"] is not None
    warmup = json.loads(lives[second]["warmup_json"])
    assert len(warmup) == 2 and all(w["ok"] for w in warmup)

    # Why: a failed canary (the stalled request triggered it) on a server whose /metrics went quiet.
    [wedge] = [detail(r) for r in ledger.query("SELECT * FROM events WHERE kind = 'wedge'")]
    assert wedge["source"] == "canary" and wedge["life_id"] == first
    assert wedge["canary"]["ok"] is False
    canaries = [
        detail(r)
        for r in ledger.query("SELECT * FROM events WHERE kind = 'canary' AND life_id = ?", (first,))
    ]
    assert canaries and not canaries[-1]["ok"]
    late = ledger.query(
        "SELECT COUNT(*) AS n FROM metric_samples WHERE life_id = ? AND ts > ?", (first, stopped_wall + 1.0)
    )
    assert late[0]["n"] == 0, "a frozen server cannot have answered /metrics"
    restarts = [detail(r) for r in ledger.query("SELECT * FROM events WHERE kind = 'restart'")]
    assert [r["reason"] for r in restarts] == ["wedge"]
    [req] = ledger.query("SELECT * FROM requests WHERE outcome = 'stall_midstream'")
    assert req["life_id"] == first and req["tokens_out"] >= 4  # the first chunk carries the role, not a token


async def test_bad_model_path_fails_the_start_clearly(tmp_path: Path) -> None:
    missing = tmp_path / "missing.gguf"
    sup = Supervisor(config(tmp_path, model=str(missing), max_restarts=0))
    with pytest.raises(ServerError) as caught:
        await asyncio.wait_for(sup.start(), 60)
    message = str(caught.value)
    assert "exited with code 2" in message
    assert f"--model: no such file: {missing}" in message


async def test_busy_port_fails_the_start_clearly(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        sup = Supervisor(config(tmp_path, port=port, max_restarts=0))
        with pytest.raises(PortBusyError) as caught:
            await asyncio.wait_for(sup.start(), 60)
    assert f"port {port} on 127.0.0.1 is already in use" in str(caught.value)
