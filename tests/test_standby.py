"""The spare life (``server.standby = 1``) on the simulator: real subprocesses, real sockets, real
SQLite. A wedge, a crash and a recycle each promote a spare that was ready before the fault, a new
spare starts behind it, a sleeping spare is woken when promoted, and a spare that dies while it
waits is replaced. How soon is ``bench standby``'s to measure, never a test's."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from test_runner_sim import IDS, attempts_of, write_config
from test_supervisor import WEDGE, Recorded, config, rows, start, stream
from wedgewatch.analysis.summary import summarise
from wedgewatch.base.errors import ConfigError
from wedgewatch.base.events import Event
from wedgewatch.base.vocab import CRASH, OK, PROMOTED, RECYCLE_INSTANCES, SPARE
from wedgewatch.base.vocab import WEDGE as WEDGE_WORD
from wedgewatch.config import ServerConfig, WarmupConfig, WatchdogConfig, load_config
from wedgewatch.ledger import Ledger, checks
from wedgewatch.proxy import Proxy
from wedgewatch.runner import entry as runner_main
from wedgewatch.supervisor import Supervisor, caches
from wedgewatch.supervisor.process import AdoptedServer, group_alive
from wedgewatch.supervisor.room import BIND_ENV, Room
from wedgewatch.testing import eventually_async

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.sqlite")


LONG = 3000
"""Tokens of a stream that lasts seconds at the simulator's 50 tokens/s times 20."""


def _spares(rec: Recorded) -> list[str]:
    return [
        e.detail["life_id"] for e in rec.events if e.kind == "server_starting" and e.detail["reason"] == SPARE
    ]


def _ready(rec: Recorded, life_id: str) -> Event | None:
    return next((e for e in rec.events if e.kind == "server_ready" and e.detail["life_id"] == life_id), None)


async def _a_ready_spare(sup: Supervisor, rec: Recorded, n: int = 1) -> str:
    """The ``n``-th spare's life id, once it is ready."""

    def found() -> str | None:
        spares = _spares(rec)
        ready = len(spares) >= n and _ready(rec, spares[n - 1]) is not None and sup.standby is not None
        return spares[n - 1] if ready and sup.standby.ready() else None

    return await eventually_async(found, timeout=60, what=f"spare {n} ready (got {rec.kinds()})")


async def test_a_wedge_promotes_the_spare_that_was_ready_before_it(tmp_path: Path, ledger: Ledger) -> None:
    sup, rec = await start(config(tmp_path, WEDGE, standby=1), ledger)
    try:
        first = sup.life_id
        spare = await _a_ready_spare(sup, rec)
        client = asyncio.create_task(stream(sup.base_url, "please WEDGE now"))
        promoted = await rec.wait_for(PROMOTED, timeout=60)
        await client
        wedge = rec.first(WEDGE_WORD)
        ready = _ready(rec, spare)
        assert wedge is not None and ready is not None
        assert promoted.detail["life_id"] == spare and promoted.detail["replaced"] == first
        assert promoted.detail["reason"] == WEDGE_WORD and promoted.detail["planned"] is False
        assert ready.ts < wedge.ts < promoted.ts, "the spare was ready before the verdict"
        assert sup.life_id == spare
        assert sup.policy.restarts == 1, "a promotion spends a restart of the budget"
        # Every fact in order: the verdict, the restart, the promotion, then the old life's end.
        kinds = rec.kinds()
        assert kinds.index(WEDGE_WORD) < kinds.index("restart") < kinds.index(PROMOTED)
        ended = await rec.wait_for("life_ended", timeout=60, life_id=first)
        assert ended.ts > promoted.ts
        # A new spare behind the promoted life.
        behind = await _a_ready_spare(sup, rec, 2)
        assert behind not in (first, spare)
        async with aiohttp.ClientSession() as s, s.get(sup.base_url + "/sim/stats") as r:
            assert (await r.json())["wedged"] is False  # the promoted life serves
    finally:
        await sup.stop()
    lives = {r["life_id"]: r for r in rows(ledger, "SELECT * FROM server_life_view")}
    assert lives[first]["end_reason"] == WEDGE_WORD and lives[spare]["start_reason"] == SPARE
    assert lives[behind]["start_reason"] == SPARE and lives[behind]["end_reason"] == "stop"
    (row,) = rows(ledger, "SELECT * FROM events WHERE kind = ?", PROMOTED)
    assert row["life_id"] == spare and json.loads(row["detail_json"])["replaced"] == first
    assert not any(group_alive(r["pid"]) for r in lives.values()), "no process of any life is left"


async def test_a_spare_that_dies_while_it_waits_is_replaced(tmp_path: Path, ledger: Ledger) -> None:
    sup, rec = await start(config(tmp_path, standby=1), ledger)
    try:
        serving = sup.life_id
        spare = await _a_ready_spare(sup, rec)
        assert sup.standby is not None and sup.standby.spare is not None
        pid = sup.standby.spare.proc.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        crash = await rec.wait_for(CRASH, timeout=60, life_id=spare)
        assert crash.detail["exit_code"] == -signal.SIGKILL
        second = await _a_ready_spare(sup, rec, 2)
        assert second != spare and sup.life_id == serving, "the serving life is not touched"
    finally:
        await sup.stop()
    ends = {r["life_id"]: r["end_reason"] for r in rows(ledger, "SELECT * FROM server_life_ends")}
    assert ends[spare] == CRASH


async def test_a_recycle_hands_over_to_the_spare_and_lets_the_old_life_finish(
    tmp_path: Path, ledger: Ledger
) -> None:
    """The old life's stream is not cut: it ends whole while the spare already serves, and the old
    life ends once idle (no ``restart`` event: nothing of it was cut)."""
    sup, rec = await start(config(tmp_path, standby=1, recycle_every_instances=1), ledger)
    try:
        first = sup.life_id
        spare = await _a_ready_spare(sup, rec)
        old_url = sup.base_url
        client = asyncio.create_task(_timed(stream(old_url, "a long answer", max_tokens=LONG)))
        await eventually_async(lambda: _running(sup) > 0, what="the stream running")
        sup.note_instance_done()
        promoted = await rec.wait_for(PROMOTED, timeout=60)
        assert promoted.detail["planned"] is True and promoted.detail["reason"] == RECYCLE_INSTANCES
        assert sup.life_id == spare and sup.base_url != old_url
        got, done = await client
        assert len(got) == LONG, "the old life's stream read whole"
        ended = await rec.wait_for("life_ended", timeout=60, life_id=first)
        assert promoted.ts < done <= ended.ts, "the old life served its stream after the handover"
        assert ended.detail["reason"] == RECYCLE_INSTANCES
        drained = rec.first("drained", life_id=first)
        assert drained is not None and drained.detail["left"] == 0
        assert "restart" not in rec.kinds()
    finally:
        await sup.stop()


async def _timed(coro: Any) -> tuple[Any, float]:
    got = await coro
    return got, time.time()


def _running(sup: Supervisor) -> int:
    life = sup.current
    return int(life.reading.running or 0) if life is not None and life.reading is not None else 0


async def test_a_sleeping_spare_is_woken_when_promoted(tmp_path: Path, ledger: Ledger) -> None:
    """vLLM's sleep mode, on the simulator's copy of its dev routes (a GPU's path, where none is)."""
    sup, rec = await start(config(tmp_path, WEDGE, standby=1, standby_sleep=True), ledger)
    try:
        spare = await _a_ready_spare(sup, rec)
        assert sup.standby is not None and sup.standby.spare is not None
        spare_url = sup.standby.spare.base_url
        stats = await _stats(spare_url)
        assert stats["asleep"] is True and stats["sleeps"] == 1
        async with (
            aiohttp.ClientSession() as s,
            s.post(spare_url + "/v1/chat/completions", json={"messages": []}) as r,
        ):
            assert r.status == 503, "asleep, it serves nothing"
        client = asyncio.create_task(stream(sup.base_url, "please WEDGE now"))
        promoted = await rec.wait_for(PROMOTED, timeout=60)
        await client
        assert promoted.detail["life_id"] == spare and promoted.detail["woke"] is not None
        stats = await _stats(spare_url)
        assert stats["asleep"] is False and stats["wakes"] == 1
        assert len(await stream(sup.base_url, "hello", max_tokens=5)) == 5
        # The promoted life keeps vLLM's dev routes: the proxy passes no client's /sleep on.
        proxy = Proxy(sup, WatchdogConfig())
        url = await proxy.start()
        try:
            async with aiohttp.ClientSession() as s, s.post(url + "/sleep") as r:
                assert r.status == 403 and (await r.json())["error"]["code"] == "not_passed_on"
        finally:
            await proxy.stop()
        assert (await _stats(sup.base_url))["asleep"] is False
    finally:
        await sup.stop()
    (row,) = [r for r in rows(ledger, "SELECT * FROM server_lives") if r["life_id"] == spare]
    assert "--enable-sleep-mode" in json.loads(row["argv_json"])


async def _stats(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(url + "/sim/stats") as r:
        body: dict[str, Any] = await r.json()
        return body


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"standby": 1, "port": 8123}, "server.standby", "set port = 0"),
        (
            {"standby": 1, "profile": "external", "url": "http://127.0.0.1:1"},
            "server.standby",
            "profile external",
        ),
        ({"standby_sleep": True}, "server.standby_sleep", "standby = 1"),
        (
            {"standby": 1, "standby_sleep": True, "profile": "vllm", "launcher": "vllm-cpu"},
            "server.standby_sleep",
            "CPU build refuses sleep mode",
        ),
        ({"standby": 1, "standby_sleep": True, "host": "0.0.0.0"}, "server.standby_sleep", "loopback"),
    ],
)
def test_a_standby_that_cannot_be_is_a_config_error(
    tmp_path: Path, fields: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(ConfigError) as err:
        Supervisor(config(tmp_path, **fields))
    assert field in str(err.value) and says in str(err.value)


async def test_the_warm_up_covers_every_served_name_and_each_shape(tmp_path: Path, ledger: Ledger) -> None:
    """The base model and each adapter get the plain warm-up requests, then each shape once per
    name; the server saw exactly those (its own count), and the ready row says what each warmed."""
    warmup = WarmupConfig(count=2, max_tokens=4, timeout=10.0, shapes=["logprobs", "json", "tools"])
    adapters = {"ada": str(tmp_path), "bob": str(tmp_path)}
    sup, _ = await start(config(tmp_path, warmup=warmup, lora_modules=adapters), ledger)
    try:
        stats = await _stats(sup.base_url)
    finally:
        await sup.stop()
    # The readiness canary asks the base model once more.
    assert stats["by_model"] == {"sim-model": 2 + 3 + 1, "ada": 2 + 3, "bob": 2 + 3}
    assert stats["by_shape"] == {"logprobs": 3, "response_format": 3, "tools": 3}
    (row,) = rows(ledger, "SELECT warmup_json FROM server_life_view")
    done = [(w["model"], w["shape"]) for w in json.loads(row["warmup_json"]) if w["ok"]]
    names = ["sim-model", "ada", "bob"]
    assert done == [(n, None) for n in names for _ in range(2)] + [
        (n, s) for s in ("logprobs", "json", "tools") for n in names
    ]


def test_a_new_life_takes_the_cpus_no_other_live_life_holds(tmp_path: Path) -> None:
    sup = Supervisor(config(tmp_path, standby=1))
    assert sup.standby is not None
    sup.standby.room = Room(True, "", cores=("0-3", "4-7"))
    assert sup.standby.env() == {BIND_ENV: "0-3"}  # the first life
    sup._life = sup.starter.new_life(AdoptedServer("http://127.0.0.1:1", None), [], "run_start", owned=False)
    sup._life.cores = "0-3"
    assert sup.standby.env() == {BIND_ENV: "4-7"}  # its spare
    sup._life.cores = "4-7"  # the spare promoted, the old life ended
    assert sup.standby.env() == {BIND_ENV: "0-3"}
    sup.standby.off = True  # refused at start: no binding at all
    assert sup.standby.env() == {}


def test_every_life_of_a_compiling_engine_shares_the_caches_in_cache_dir(tmp_path: Path) -> None:
    cfg = ServerConfig(profile="vllm", cache_dir=str(tmp_path / "c"), env={"TRITON_CACHE_DIR": "/mine"})
    got = caches.env(cfg, outer={"FLASHINFER_WORKSPACE_BASE": "/theirs"})
    assert got == {
        "VLLM_CACHE_ROOT": str(tmp_path / "c" / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c" / "torchinductor"),
    }, "what the user set is theirs"
    assert (tmp_path / "c" / "vllm").is_dir()
    assert caches.env(ServerConfig(profile="llamacpp", cache_dir=str(tmp_path)), outer={}) == {}
    assert caches.env(ServerConfig(profile="vllm", cache_dir=""), outer={}) == {}


def test_a_recycle_in_the_middle_of_a_run_fails_no_request(tmp_path: Path) -> None:
    """A run on the simulator recycling after every instance, with a spare: each recycle hands
    over to a ready spare while attempts are in flight, and no request fails (the watchdog's
    ``fail``: a cut request would be an API error here, not resumed out of sight)."""
    server = "recycle_every_instances = 1\nstandby = 1"
    cfg = load_config(
        write_config(tmp_path, ids=IDS[:4], concurrency=2, server=server, deadline=200.0, wedge_window=200.0)
    )
    cfg.watchdog.on_wedge = "fail"
    ex = runner_main.start(cfg, run_id="handover")
    assert ex.end_mark == "finished"
    with Ledger(cfg.run.ledger) as lg:
        att = attempts_of(lg, "handover")
        requests = [dict(r) for r in lg.query("SELECT outcome, life_id FROM requests")]
        promoted = [
            json.loads(r["detail_json"]) for r in lg.query("SELECT * FROM events WHERE kind = ?", (PROMOTED,))
        ]
        summary = summarise(lg, "handover")
        broken = checks.problems(lg)
    assert broken == [], "spares overlap their serving lives by design, and nothing else does"
    assert promoted and all(p["planned"] and p["reason"] == RECYCLE_INSTANCES for p in promoted)
    assert {r["outcome"] for r in requests} == {OK}, requests
    assert all([a["status"] for a in rows] == ["submitted"] for rows in att.values()), att
    # Requests ran on more than one life: the handovers happened under the run, not after it.
    assert len({r["life_id"] for r in requests}) >= 2
    assert summary["server"]["restart_reasons"].get(RECYCLE_INSTANCES, 0) >= len(promoted)
