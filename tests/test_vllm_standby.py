"""A spare life on the real vLLM (the CPU build, bundled Gemma 3 270M): one supervised server with
``standby = 1`` behind the watchdog proxy at its defaults (``on_wedge = "resume"``), whose lives
the tests share.

First what the spare is made of: the two engines are bound to the two halves of the CPUs
(``VLLM_CPU_OMP_THREADS_BIND``), both point their caches into ``cache_dir``, the start said the
memory arithmetic, and vLLM took the warm-up's request shapes (log probabilities, a structured
output, a tool offered with tool_choice "none"). Last, the EngineCore is frozen (SIGSTOP) in the middle of a stream
at temperature 0: the spare, ready before the verdict, is promoted, and the stream reads whole,
continued there from the token ids the proxy kept. How soon is ``bench standby``'s to measure,
never a test's.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from vllm_helpers import VLLM_GROUP, config, detail, provision, role_pid, state
from wedgewatch.base.events import Event
from wedgewatch.base.vocab import OK, PROMOTED, RESUMED, SPARE, STANDBY_ROOM, WEDGE
from wedgewatch.config import WarmupConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.stack.servers import Stack
from wedgewatch.supervisor import Supervisor
from wedgewatch.supervisor.room import BIND_ENV
from wedgewatch.testing import eventually_async
from wedgewatch.wire.sse import SSEParser

pytestmark = [
    VLLM_GROUP,
    pytest.mark.long,
    pytest.mark.two_engines,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.timeout(900),
]

NEXT_LIFE = 600.0
"""A hang guard for an engine's start on a loaded machine (a start took 231 s beside other work)."""
COUNT = [{"role": "user", "content": "Count from one to twenty in words, separated by commas."}]


@dataclass
class Rig:
    stack: Stack
    ledger: Ledger
    cache: Path
    events: list[Event] = field(default_factory=list)

    @property
    def sup(self) -> Supervisor:
        return self.stack.supervisor

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self.ledger.query(sql, params)]

    def first(self, kind: str, **detail: Any) -> Event | None:
        return next(
            (
                e
                for e in self.events
                if e.kind == kind and all(e.detail.get(k) == v for k, v in detail.items())
            ),
            None,
        )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rig(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Rig]:
    await asyncio.to_thread(provision)
    tmp = tmp_path_factory.mktemp("vllm-standby")
    ledger = Ledger(tmp / "ledger.sqlite")
    cfg = config(
        tmp,
        standby=1,
        cache_dir=str(tmp / "cache"),
        warmup=WarmupConfig(count=1, max_tokens=4, shapes=["logprobs", "json", "tools"]),
        args=["--max-model-len", "2048"],
    )
    stack = Stack(cfg, WatchdogConfig(), ledger=ledger)
    rig = Rig(stack, ledger, tmp / "cache")
    stack.bus.subscribe(rig.events.append)
    await stack.start()
    yield rig
    await stack.stop()
    ledger.close()


async def _spare_ready(rig: Rig) -> str:
    standby = rig.sup.standby
    assert standby is not None
    await eventually_async(standby.ready, timeout=NEXT_LIFE, interval=0.5, what="the spare ready")
    assert standby.spare is not None
    return standby.spare.life_id


def _environ(pid: int) -> dict[str, str]:
    """The environment a process was started with (the launcher execs vLLM with its own)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


async def test_two_engines_on_two_halves_of_the_cpus_share_one_cache(rig: Rig) -> None:
    await _spare_ready(rig)
    room = rig.first(STANDBY_ROOM)
    assert room is not None and room.detail["on"] is True and "VLLM_CPU_KVCACHE_SPACE" in room.detail["line"]
    serving, standby = rig.sup.current, rig.sup.standby
    assert serving is not None and standby is not None and standby.spare is not None
    envs, servers = [], []
    for life in (serving, standby.spare):
        assert life.proc.pid is not None
        core = role_pid(life.proc.pid, "VLLM::EngineCore")
        assert core is not None
        envs.append(_environ(core))
        servers.append(_environ(life.proc.pid))
    binds = [e[BIND_ENV] for e in envs]
    assert len(set(binds)) == 2, binds  # each engine its own half
    # The engines compile with torch inductor and Triton, into the shared folders. vLLM's own root
    # is the API server's (vLLM 0.32 starts its EngineCore without VLLM_CACHE_ROOT in its
    # environment: docs/supervisor.md, "Not built, or weak"), and vLLM writes there.
    for name, folder in (("TORCHINDUCTOR_CACHE_DIR", "torchinductor"), ("TRITON_CACHE_DIR", "triton")):
        assert all(e[name] == str(rig.cache / folder) for e in envs), name
    assert all(e["VLLM_CACHE_ROOT"] == str(rig.cache / "vllm") for e in servers)
    assert any((rig.cache / "vllm").iterdir())


async def test_vllm_takes_every_warm_up_shape(rig: Rig) -> None:
    rows = rig.rows("SELECT warmup_json FROM server_life_view WHERE warmup_json IS NOT NULL")
    assert len(rows) == 2  # the serving life and its spare
    for row in rows:
        warm = json.loads(row["warmup_json"])
        assert [(w["shape"], w["ok"]) for w in warm] == [
            (None, True),
            ("logprobs", True),
            ("json", True),
            ("tools", True),
        ], warm


async def _read(
    url: str, body: dict[str, Any], act: Callable[[], None] | None = None, after: int = 8
) -> list[dict[str, Any]]:
    """A streamed chat answer's chunks; ``act`` once the ``after``-th chunk with text is read."""
    chunks: list[dict[str, Any]] = []
    texts = 0
    parser = SSEParser()
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=NEXT_LIFE)) as s,
        s.post(url + "/v1/chat/completions", json=body) as resp,
    ):
        assert resp.status == 200, await resp.text()
        async for raw in resp.content.iter_any():
            for ev in parser.feed(raw):
                if ev.data is None or ev.is_done:
                    continue
                chunks.append(ev.json())
                if chunks[-1]["choices"] and chunks[-1]["choices"][0]["delta"].get("content"):
                    texts += 1
                    if texts == after and act is not None:
                        act()
    return chunks


def _text(chunks: list[dict[str, Any]]) -> list[tuple[str | None, str | None]]:
    return [
        (c["choices"][0]["delta"].get("content"), c["choices"][0]["finish_reason"])
        for c in chunks
        if c["choices"]
    ]


async def test_a_frozen_stream_reads_whole_from_the_spare_that_was_ready_before_the_verdict(rig: Rig) -> None:
    spare = await _spare_ready(rig)
    life = rig.sup.current
    assert life is not None and life.proc.pid is not None
    target = role_pid(life.proc.pid, "VLLM::EngineCore")
    assert target is not None
    body = {
        "model": "gemma3-270m",
        "messages": COUNT,
        "max_tokens": 60,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    url = rig.stack.url
    try:
        whole = await _read(url, body)
        frozen = await _read(url, body, lambda: os.kill(target, signal.SIGSTOP))
    finally:
        if state(target) == "T":
            os.kill(target, signal.SIGCONT)
    assert _text(frozen) == _text(whole) and len(_text(whole)) > 40
    assert frozen[-1]["usage"] == whole[-1]["usage"]
    wedge, promoted, ready = (
        rig.first(WEDGE, life_id=life.life_id),
        rig.first(PROMOTED),
        rig.first("server_ready", life_id=spare),
    )
    assert wedge is not None and promoted is not None and ready is not None
    assert promoted.detail["life_id"] == spare and promoted.detail["replaced"] == life.life_id
    assert ready.ts < wedge.ts < promoted.ts, "the spare was ready before the verdict"
    legs = rig.rows("SELECT * FROM requests WHERE life_id = ? AND outcome = ?", (life.life_id, RESUMED))
    assert len(legs) == 1
    [after] = [
        q for q in rig.rows("SELECT * FROM requests") if detail(q).get("resumes") == legs[0]["request_id"]
    ]
    assert after["outcome"] == OK and after["life_id"] == spare
    lives = {r["life_id"]: r for r in rig.rows("SELECT * FROM server_life_view")}
    assert lives[spare]["start_reason"] == SPARE
