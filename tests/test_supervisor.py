"""The supervisor against the simulator as its managed server: real subprocesses, real sockets,
real SQLite. Short windows and the simulator's --time-scale keep each test to a few seconds."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from conftest import RunningServer
from wedgewatch.base.errors import PortBusyError, ServerError, ServerStartError
from wedgewatch.base.events import Event, EventBus, Stalled
from wedgewatch.config import ServerConfig, WarmupConfig
from wedgewatch.ledger import Ledger
from wedgewatch.supervisor import Supervisor
from wedgewatch.supervisor.process import group_alive
from wedgewatch.testing import eventually_async, settle

WINDOW = 1.5
INTERVAL = 0.25
# No test here bounds a latency by the wall clock: how soon a wedge is seen is the detector's rule
# (tests/test_detection_units.py, on given times) and `wedgewatch bench detection`'s to measure.


def config(tmp_path: Path, scenario: str | None = None, **fields: Any) -> ServerConfig:
    name = "healthy"
    if scenario is not None:
        path = tmp_path / "scenario.toml"
        path.write_text(scenario)
        name = str(path)
    base: dict[str, Any] = {
        "profile": "sim",
        "scenario": name,
        "time_scale": 20.0,
        "log_dir": str(tmp_path / "logs"),
        "scrape_interval": INTERVAL,
        "wedge_window": WINDOW,
        "canary_timeout": 2.0,
        "startup_timeout": 20.0,
        "stop_grace": 3.0,
        "restart_backoff": 0.1,
        "max_restarts": 3,
        "warmup": WarmupConfig(timeout=10.0),
    }
    base.update(fields)
    return ServerConfig(**base)


class Recorded:
    """Every event the supervisor publishes, in order."""

    def __init__(self, bus: EventBus) -> None:
        self.events: list[Event] = []
        bus.subscribe(self.events.append)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def first(self, kind: str, **detail: Any) -> Event | None:
        return next(
            (
                e
                for e in self.events
                if e.kind == kind and all(e.detail.get(k) == v for k, v in detail.items())
            ),
            None,
        )

    async def wait_for(self, kind: str, timeout: float, **detail: Any) -> Event:
        return await eventually_async(
            lambda: self.first(kind, **detail), timeout, what=f"{kind} {detail} (got {self.kinds()})"
        )


def rows(ledger: Ledger, sql: str, *params: Any) -> list[dict[str, Any]]:
    return [dict(r) for r in ledger.query(sql, params)]


async def stream(url: str, text: str, max_tokens: int = 200, timeout: float = 30.0) -> list[bytes]:
    """A streamed chat request; returns its lines that carried a token."""
    times: list[bytes] = []
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": True,
    }
    try:
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                url + "/v1/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=timeout)
            ) as r,
        ):
            async for line in r.content:
                if line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
                    times.append(line)
    except (aiohttp.ClientError, TimeoutError):
        pass  # the server was killed under the request: expected in these tests
    return times


async def start(cfg: ServerConfig, ledger: Ledger) -> tuple[Supervisor, Recorded]:
    bus = EventBus()
    rec = Recorded(bus)
    sup = Supervisor(cfg, ledger=ledger, bus=bus, run_id="run-t")
    await sup.start()
    return sup, rec


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.sqlite")


async def test_fresh_start_is_ready_warmed_and_recorded(tmp_path: Path, ledger: Ledger) -> None:
    sup, rec = await start(config(tmp_path), ledger)
    try:
        async with aiohttp.ClientSession() as s, s.get(sup.base_url + "/sim/stats") as r:
            stats = await r.json()
        # the readiness canary (1 token) and two warm-ups of 40 tokens, nothing else
        assert stats["completed"] == 3 and stats["tokens_generated"] == 1 + 2 * 40
        life = sup.life()
        assert life is not None and life.life_id == sup.life_id and life.age_requests == 3
        pid = rows(ledger, "SELECT pid FROM server_lives")[0]["pid"]
        await eventually_async(lambda: len(_sampled(ledger)) >= 3, what="scrapes recorded")
    finally:
        await sup.stop()
    assert not group_alive(pid), "no process of the group is left"
    (row,) = rows(ledger, "SELECT * FROM server_life_view")
    assert row["start_reason"] == "run_start" and row["run_id"] == "run-t" and row["profile"] == "sim"
    argv = json.loads(row["argv_json"])
    assert argv[argv.index("--scenario") + 1] == "healthy" and "--port" in argv
    warmups = json.loads(row["warmup_json"])
    assert len(warmups) == 2 and all(w["ok"] and w["tokens"] == 40 for w in warmups)
    assert row["end_reason"] == "stop" and row["age_requests"] == 3 and row["age_tokens"] == 81
    assert rec.kinds()[:2] == ["server_starting", "server_ready"]
    names = _sampled(ledger)
    assert {"vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:num_requests_running"} <= names


async def test_warm_up_requests_of_other_kinds_follow_the_prompts(tmp_path: Path, ledger: Ledger) -> None:
    """``warmup.requests``: one request of each kind after the prompt's, each table merged into
    the warm-up's body (here: other token counts, and an unknown model, which fails the warm-up)."""
    kinds = [
        {"max_tokens": 3},
        {"max_tokens": 5, "logprobs": True, "top_logprobs": 2},
        {"max_tokens": 2, "stream": False},  # one answer: what vLLM's prompt_logprobs need
    ]
    warmup = WarmupConfig(timeout=10.0, count=1, requests=kinds)
    sup, _ = await start(config(tmp_path, warmup=warmup), ledger)
    try:
        async with aiohttp.ClientSession() as s, s.get(sup.base_url + "/sim/stats") as r:
            stats = await r.json()
    finally:
        await sup.stop()
    assert stats["completed"] == 1 + 1 + 3 and stats["tokens_generated"] == 1 + 40 + 3 + 5 + 2
    (row,) = rows(ledger, "SELECT warmup_json FROM server_life_view")
    assert [w["tokens"] for w in json.loads(row["warmup_json"])] == [40, 3, 5, 2]
    bad = WarmupConfig(timeout=10.0, count=1, requests=[{"model": "no-such-adapter", "stream": False}])
    with pytest.raises(
        ServerError, match=r"warm-up request 2 of 2 \('no-such-adapter', requests\[0\]\) failed"
    ):
        await start(config(tmp_path, warmup=bad, max_restarts=0), ledger)


def _sampled(ledger: Ledger) -> set[str]:
    return {r["name"] for r in rows(ledger, "SELECT DISTINCT name FROM metric_samples")}


WEDGE = """
[[fault]]
when.contains = "WEDGE"
times = 1
action = "wedge"
after_tokens = 2
"""


async def test_scripted_wedge_is_seen_from_metrics_and_restarted(tmp_path: Path, ledger: Ledger) -> None:
    sup, rec = await start(config(tmp_path, WEDGE), ledger)
    try:
        first = sup.life_id
        client = asyncio.create_task(stream(sup.base_url, "please WEDGE now"))
        ev = await rec.wait_for("wedge", timeout=WINDOW + 10)
        ready = await _next_ready(rec, first)
        seen = await client
        assert len(seen) == 2, "the fault let two tokens through, then nothing"
        assert ev.evidence["source"] == "metrics" and ev.evidence["running"] >= 1
        assert ev.evidence["flat_seconds"] >= WINDOW, "never before the window"
        assert ready.detail["life_id"] != first and sup.life_id == ready.detail["life_id"]
    finally:
        await sup.stop()
    lives = rows(ledger, "SELECT * FROM server_life_view ORDER BY started_at")
    assert [x["start_reason"] for x in lives] == ["run_start", "wedge"]
    assert [x["end_reason"] for x in lives] == ["wedge", "stop"]
    assert lives[0]["age_tokens"] == 81 + 2
    (wedge,) = rows(ledger, "SELECT * FROM events WHERE kind = 'wedge'")
    detail = json.loads(wedge["detail_json"])
    assert wedge["life_id"] == first and detail["flat_seconds"] >= WINDOW
    flat = [s for s in detail["samples"] if s[2] >= 1]
    assert len({s[1] for s in flat}) == 1, "the evidence shows flat counters with work running"
    kinds = [r["kind"] for r in rows(ledger, "SELECT kind FROM events ORDER BY id")]
    assert kinds.index("wedge") < kinds.index("restart")
    assert rec.kinds().index("restart") < len(rec.kinds()) - 1


async def _next_ready(rec: Recorded, old: str | None, timeout: float = 20) -> Event:
    def ready() -> Event | None:
        return next((e for e in rec.events if e.kind == "server_ready" and e.detail["life_id"] != old), None)

    return await eventually_async(ready, timeout, what=f"a new life (got {rec.kinds()})")


async def test_health_200_through_a_wedge_does_not_fool_it(tmp_path: Path, ledger: Ledger) -> None:
    sup, rec = await start(config(tmp_path, WEDGE, restart_on_wedge=False), ledger)
    try:
        client = asyncio.create_task(stream(sup.base_url, "WEDGE", timeout=WINDOW + 8))
        await rec.wait_for("wedge", timeout=WINDOW + 10)
        async with aiohttp.ClientSession() as s:
            async with s.get(sup.base_url + "/health") as r:
                assert r.status == 200, "the wedged server still says it is healthy"
            async with s.get(sup.base_url + "/sim/stats") as r:
                assert (await r.json())["wedged"] is True
        assert "restart" not in rec.kinds() and sup.life_id is not None
        client.cancel()
    finally:
        await sup.stop()


STOCHASTIC = """
[wedge]
base_hazard = 50.0    # a request of a warm server wedges it almost surely (1 - e^-50)
cold_requests = 3     # ... but the canary and the two warm-ups never do
cold_multiplier = 0.0
"""


async def test_stochastic_wedge_is_detected_and_restarted(tmp_path: Path, ledger: Ledger) -> None:
    sup, rec = await start(config(tmp_path, STOCHASTIC), ledger)
    try:
        first = sup.life_id
        client = asyncio.create_task(stream(sup.base_url, "hello", max_tokens=400))
        ev = await rec.wait_for("wedge", timeout=WINDOW + 12)
        await _next_ready(rec, first)
        seen = await client
        assert seen, "the request got some tokens before the wedge"
        assert 0 < len(seen) < 400, "and not all of them: the wedge cut it"
        assert ev.evidence["source"] == "metrics" and ev.evidence["flat_seconds"] >= WINDOW
    finally:
        await sup.stop()
    lives = rows(ledger, "SELECT start_reason, end_reason FROM server_life_view ORDER BY started_at")
    assert lives == [
        {"start_reason": "run_start", "end_reason": "wedge"},
        {"start_reason": "wedge", "end_reason": "stop"},
    ]


CRASH = """
[[fault]]
when.contains = "CRASH"
action = "crash"
exit_code = 3
after_tokens = 1
"""


async def test_crash_is_detected_and_restarted(tmp_path: Path, ledger: Ledger) -> None:
    sup, rec = await start(config(tmp_path, CRASH), ledger)
    try:
        first = sup.life_id
        await stream(sup.base_url, "CRASH please")
        crash = await rec.wait_for("crash", timeout=5)
        assert crash.detail["exit_code"] == 3 and crash.detail["life_id"] == first
        await _next_ready(rec, first)
    finally:
        await sup.stop()
    lives = rows(
        ledger, "SELECT start_reason, end_reason, exit_code FROM server_life_view ORDER BY started_at"
    )
    assert lives[0] == {"start_reason": "run_start", "end_reason": "crash", "exit_code": 3}
    assert lives[1]["start_reason"] == "crash" and lives[1]["end_reason"] == "stop"
    assert rows(ledger, "SELECT count(*) n FROM events WHERE kind = 'crash'")[0]["n"] == 1


async def test_exit_during_startup_gives_up_after_bounded_retries(tmp_path: Path, ledger: Ledger) -> None:
    cfg = config(tmp_path, "[startup]\nexit_code = 3\n", max_restarts=1)
    with pytest.raises(ServerStartError) as err:
        await start(cfg, ledger)
    msg = str(err.value)
    assert "gave up after 1 restarts" in msg and "exited with code 3 during start-up" in msg
    assert "last lines of" in msg
    lives = rows(
        ledger, "SELECT start_reason, end_reason, exit_code FROM server_life_view ORDER BY started_at"
    )
    assert lives == [
        {"start_reason": "run_start", "end_reason": "start_failed", "exit_code": 3},
        {"start_reason": "start_failed", "end_reason": "start_failed", "exit_code": 3},
    ]


async def test_never_ready_hits_the_hard_deadline(tmp_path: Path, ledger: Ledger) -> None:
    # The deadline itself on the manual clock: test_clock.py. Here, the real server's side of it.
    cfg = config(tmp_path, "[startup]\nunready_seconds = 600\n", startup_timeout=1.5, max_restarts=0)
    with pytest.raises(ServerStartError, match=r"not ready after 1.5s \(waiting for /health to answer 200\)"):
        await start(cfg, ledger)
    (life,) = rows(ledger, "SELECT pid, end_reason FROM server_life_view")
    assert life["end_reason"] == "start_failed" and not group_alive(life["pid"])


async def test_busy_port_is_a_clear_error_not_a_hang(tmp_path: Path, ledger: Ledger) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(PortBusyError, match=f"port {port} on 127.0.0.1 is already in use"):
            await start(config(tmp_path, port=port), ledger)
    assert rows(ledger, "SELECT * FROM server_lives") == []  # refused before any start: no hang


async def test_a_launcher_that_is_not_installed_is_one_clear_error_with_the_way_out(
    tmp_path: Path, ledger: Ledger
) -> None:
    cfg = config(
        tmp_path, profile="llamacpp", model=str(tmp_path / "m.gguf"), launcher="no-such-llama-server"
    )
    with pytest.raises(ServerStartError) as info:
        await start(cfg, ledger)
    message = str(info.value)
    assert message.startswith("cannot run 'no-such-llama-server': No such file or directory")
    assert 'server.launcher = "xllamacpp"' in message and "\n" not in message


async def test_bind_failure_in_the_log_is_a_port_error(tmp_path: Path, ledger: Ledger) -> None:
    # A server that only finds out at bind time (someone took the port after our check).
    script = "import sys; print('OSError: [Errno 98] Address already in use', file=sys.stderr); sys.exit(1)"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = config(tmp_path, profile="command", command=[sys.executable, "-c", script], port=port)
    with pytest.raises(PortBusyError, match="could not bind"):
        await start(cfg, ledger)
    (life,) = rows(ledger, "SELECT end_reason FROM server_life_view")
    assert life["end_reason"] == "port_busy"


async def test_a_server_ignoring_sigterm_is_killed(tmp_path: Path, ledger: Ledger) -> None:
    sup, _ = await start(config(tmp_path, "[startup]\nignore_sigterm = true\n", stop_grace=0.5), ledger)
    pid = rows(ledger, "SELECT pid FROM server_lives")[0]["pid"]
    t0 = time.monotonic()
    await sup.stop()
    # The grace is real time (the process's stop): a lower bound, which a busy machine cannot break.
    assert time.monotonic() - t0 >= 0.5, "it waited the grace period first"
    assert not group_alive(pid)
    (life,) = rows(ledger, "SELECT end_reason, exit_code FROM server_life_view")
    assert life == {"end_reason": "stop", "exit_code": -9}


async def test_consecutive_api_errors_restart_the_server(tmp_path: Path, ledger: Ledger) -> None:
    sup, rec = await start(config(tmp_path), ledger)
    try:
        first = sup.life_id
        sup.note_attempt(True)
        sup.note_attempt(True, life_id="life-long-gone")  # an attempt of an earlier life: ignored
        await settle()  # the decision is taken at once: none was
        assert sup.current is not None and not sup.current.restart_due and "restart" not in rec.kinds()
        sup.note_attempt(True)
        restart = await rec.wait_for("restart", timeout=5)
        assert restart.detail == {"reason": "api_errors", "life_id": first}
        await _next_ready(rec, first)
    finally:
        await sup.stop()
    reasons = [
        r["start_reason"] for r in rows(ledger, "SELECT start_reason FROM server_lives ORDER BY started_at")
    ]
    assert reasons == ["run_start", "api_errors"]


async def test_recycling_every_n_instances_is_not_a_failure(tmp_path: Path, ledger: Ledger) -> None:
    sup, rec = await start(config(tmp_path, recycle_every_instances=2, max_restarts=0), ledger)
    try:
        first = sup.life_id
        sup.note_instance_done()
        await settle()  # the decision is taken at once: none was
        assert sup.current is not None and not sup.current.recycling and "restart" not in rec.kinds()
        sup.note_instance_done()
        await _next_ready(rec, first)
        await sup.wait_ready()  # max_restarts = 0, yet no give-up: recycling is planned
    finally:
        await sup.stop()
    assert rows(ledger, "SELECT end_reason FROM server_life_ends ORDER BY ended_at")[0] == {
        "end_reason": "recycle_instances"
    }


async def _stall_on_a_wedge(sup: Supervisor, bus: EventBus, life_id: str | None) -> asyncio.Task[list[bytes]]:
    """A stream that wedges the server, then the proxy's stall on it (which starts a canary)."""
    client = asyncio.create_task(stream(sup.base_url, "WEDGE"))

    async def wedged() -> bool:
        return bool((await _sim_stats(sup))["wedged"])

    await eventually_async(wedged, what="the server wedged")
    bus.publish(
        Stalled(request_id="r", path="/v1/chat/completions", life_id=life_id, outcome="stall_midstream")
    )
    return client


async def _sim_stats(sup: Supervisor) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(sup.base_url + "/sim/stats") as r:
        data: dict[str, Any] = await r.json()
        return data


async def _canary_on_a_wedge(sup: Supervisor, bus: EventBus) -> asyncio.Task[list[bytes]]:
    """``_stall_on_a_wedge``, then wait until the canary the stall started is in flight."""
    client = await _stall_on_a_wedge(sup, bus, sup.life_id)
    life = sup.current
    assert life is not None
    await eventually_async(lambda: life.probe_task is not None, timeout=5, what="a canary in flight")
    return client


async def test_proxy_stall_triggers_a_canary_and_a_failed_canary_is_a_wedge(
    tmp_path: Path, ledger: Ledger
) -> None:
    # wedge_window far beyond the test: only the canary can find this wedge
    sup, rec = await start(config(tmp_path, WEDGE, wedge_window=120, canary_timeout=1.0), ledger)
    proxy_bus = EventBus()
    sup.attach(proxy_bus)
    try:
        first = sup.life_id
        proxy_bus.publish(
            Stalled(request_id="r", path="/v1/chat/completions", life_id=first, outcome="stall_midstream")
        )
        canaries = await eventually_async(
            lambda: rows(ledger, "SELECT detail_json FROM events WHERE kind = 'canary'"), what="a canary"
        )
        assert len(canaries) == 1 and json.loads(canaries[0]["detail_json"])["ok"] is True
        assert "wedge" not in rec.kinds(), "a healthy server passes its canary"

        client = await _stall_on_a_wedge(sup, proxy_bus, first)
        wedge = await rec.wait_for("wedge", timeout=5)
        assert wedge.evidence["source"] == "canary" and wedge.evidence["canary"]["ok"] is False
        assert wedge.evidence["trigger"]["event"] == "stall"
        await _next_ready(rec, first)
        await client
    finally:
        await sup.stop()
    lives = rows(ledger, "SELECT start_reason FROM server_lives ORDER BY started_at")
    assert [x["start_reason"] for x in lives] == ["run_start", "wedge"]


async def test_an_api_errors_restart_waits_for_the_canary_in_flight(tmp_path: Path, ledger: Ledger) -> None:
    # The attempt that failed on a wedged server ends (and is counted) while the canary its stall
    # started is still waiting: the canary's verdict comes first, so the life is restarted as
    # wedged and the attempts that failed on it are requeued, not charged to their instances.
    cfg = config(tmp_path, WEDGE, wedge_window=120, canary_timeout=1.0, restart_after_api_errors=1)
    sup, rec = await start(cfg, ledger)
    proxy_bus = EventBus()
    sup.attach(proxy_bus)
    try:
        first = sup.life_id
        client = await _canary_on_a_wedge(sup, proxy_bus)
        sup.note_attempt(True, first)
        wedge = await rec.wait_for("wedge", timeout=5)
        assert wedge.evidence["source"] == "canary"
        await _next_ready(rec, first)
        await client
    finally:
        await sup.stop()
    lives = rows(ledger, "SELECT start_reason FROM server_lives ORDER BY started_at")
    assert [x["start_reason"] for x in lives] == ["run_start", "wedge"]
    assert "api_errors" not in rec.kinds()


async def test_settle_waits_for_a_canary_that_a_busy_machine_made_late(
    tmp_path: Path, ledger: Ledger
) -> None:
    # On a loaded machine the canary's 1 s timeout fired 0.7 s late, the runner stopped waiting
    # before the wedge was recorded, and the attempt the wedge failed was charged to its instance.
    # Here the event loop is held for 2.5 s (as a busy machine would hold it) while settle waits:
    # the canary's timeout and settle's own bound are both overdue when the loop runs again.
    cfg = config(tmp_path, WEDGE, wedge_window=120, canary_timeout=1.0, restart_on_wedge=False)
    sup, rec = await start(cfg, ledger)
    proxy_bus = EventBus()
    sup.attach(proxy_bus)
    try:
        first = sup.life_id
        client = await _canary_on_a_wedge(sup, proxy_bus)
        settling = asyncio.create_task(sup.settle(first))
        await asyncio.sleep(0)
        time.sleep(2.5)  # blocking the loop is the point
        await asyncio.wait_for(settling, timeout=15)
        assert "wedge" in rec.kinds(), "settle returned before the canary's verdict"
        client.cancel()
    finally:
        await sup.stop()


HOLD = """
[[fault]]
when.contains = "HOLD"
action = "stall_ttft"
"""


async def test_no_canary_when_the_server_is_at_its_concurrency_limit(tmp_path: Path, ledger: Ledger) -> None:
    cfg = config(tmp_path, HOLD, args=["--max-num-seqs", "1"], wedge_window=120, canary_timeout=1.0)
    sup, rec = await start(cfg, ledger)
    proxy_bus = EventBus()
    sup.attach(proxy_bus)
    try:
        client = asyncio.create_task(stream(sup.base_url, "HOLD", timeout=30))

        def running() -> bool:
            n = rows(
                ledger,
                "SELECT value FROM metric_samples WHERE name = 'vllm:num_requests_running' ORDER BY id DESC LIMIT 1",
            )
            return bool(n and n[0]["value"] >= 1)

        await eventually_async(running, timeout=5, what="the held request seen running by a scrape")
        proxy_bus.publish(
            Stalled(request_id="r", path="/v1/chat/completions", life_id=sup.life_id, outcome="stall_ttft")
        )
        (canary,) = await eventually_async(
            lambda: rows(ledger, "SELECT detail_json FROM events WHERE kind = 'canary'"), what="a canary"
        )
        detail = json.loads(canary["detail_json"])
        assert detail["skipped"] == "at concurrency limit" and detail["limit"] == 1 and detail["running"] == 1
        assert "wedge" not in rec.kinds()
        client.cancel()
    finally:
        await sup.stop()


async def test_fresh_false_adopts_the_running_server_and_leaves_it(
    tmp_path: Path, ledger: Ledger, start_sim: Callable[..., RunningServer]
) -> None:
    used = start_sim("--time-scale", "20")
    port = int(used.url.rsplit(":", 1)[1])
    sup, _ = await start(config(tmp_path, fresh=False, port=port), ledger)
    try:
        assert sup.base_url == used.url
    finally:
        await sup.stop()
    (life,) = rows(ledger, "SELECT * FROM server_life_view")
    assert life["start_reason"] == "adopted" and life["end_reason"] == "detached"
    assert life["pid"] == used.proc.pid and "sim" in json.loads(life["argv_json"])
    assert used.proc.poll() is None, "a server we did not start is left running"
    assert os.getpgid(used.proc.pid) == used.proc.pid


async def test_external_server_is_watched_and_restarted_only_by_its_hook(
    tmp_path: Path, ledger: Ledger, start_sim: Callable[..., RunningServer]
) -> None:
    (tmp_path / "wedge.toml").write_text(WEDGE)
    ext = start_sim("--time-scale", "20", "--scenario", str(tmp_path / "wedge.toml"))
    marker = tmp_path / "hook-ran"
    hook = [sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')"]
    # no hook: a wedge is recorded, the restart is skipped, the server is left alone
    sup, rec = await start(config(tmp_path, profile="external", url=ext.url), ledger)
    try:
        assert sup.base_url == ext.url
        client = asyncio.create_task(stream(ext.url, "WEDGE", timeout=WINDOW + 6))
        await rec.wait_for("wedge", timeout=WINDOW + 10)
        await rec.wait_for("restart_skipped", timeout=5)  # what the supervisor did about it
        assert "restart" not in rec.kinds()
        client.cancel()
    finally:
        await sup.stop()
    assert ext.proc.poll() is None, "never stopped: it is not ours"
    skipped = rows(ledger, "SELECT life_id FROM events WHERE kind = 'restart_skipped'")
    assert len(skipped) == 1
    # with a hook: a restart runs it, then waits for readiness again
    ext = start_sim("--time-scale", "20")  # a healthy one: the first stays wedged
    ledger2 = Ledger(tmp_path / "l2.sqlite")
    cfg = config(tmp_path, profile="external", url=ext.url, restart_hook=hook, fresh=False)
    sup, rec = await start(cfg, ledger2)
    try:
        assert not marker.exists(), "fresh = false: the hook does not run at start"
        await sup.restart("manual")
        assert marker.read_text() == "x"
        await sup.wait_ready()
    finally:
        await sup.stop()
    lives = rows(
        ledger2, "SELECT start_reason, end_reason, argv_json FROM server_life_view ORDER BY started_at"
    )
    assert [(x["start_reason"], x["end_reason"]) for x in lives] == [
        ("adopted", "manual"),
        ("manual", "detached"),
    ]
    assert ext.proc.poll() is None


async def test_wait_ready_never_hands_out_a_dead_life(tmp_path: Path, ledger: Ledger) -> None:
    # A slow scrape interval: the watch loop would notice the death only seconds later, so a
    # prompt answer can only come from wait_ready checking the process itself.
    sup, rec = await start(config(tmp_path, scrape_interval=30.0, wedge_window=60.0), ledger)
    try:
        first = sup.life_id
        pid = sup._life.proc.pid if sup._life is not None else None
        assert pid is not None
        os.kill(pid, 9)
        await eventually_async(lambda: sup._life is None or sup._life.proc.poll() is not None, what="dead")
        await asyncio.wait_for(sup.wait_ready(), timeout=20)
        assert sup.life_id != first
        crash = await rec.wait_for("crash", timeout=1)
        assert crash.detail["life_id"] == first
    finally:
        await sup.stop()
    assert rows(ledger, "SELECT count(*) n FROM events WHERE kind = 'crash'")[0]["n"] == 1


LINGERING_CRASH = """
[[fault]]
when.contains = "CRASH"
action = "crash"
exit_code = 3
after_tokens = 1
exit_delay = 7.0  # 0.35 s at time scale 20: sockets closed, process not yet reapable
"""


async def test_a_refused_canary_from_a_dying_server_is_a_crash_not_a_wedge(
    tmp_path: Path, ledger: Ledger
) -> None:
    # The race CI once met: the server's sockets close before its process can be reaped, and a
    # proxy event in that gap sends a canary that is refused. Slow scrapes, so only the canary
    # path can decide.
    sup, rec = await start(config(tmp_path, LINGERING_CRASH, scrape_interval=30.0, wedge_window=60.0), ledger)
    proxy_bus = EventBus()
    sup.attach(proxy_bus)
    try:
        first = sup.life_id
        assert sup._life is not None
        proc = sup._life.proc
        await stream(sup.base_url, "CRASH please")  # ends as the sockets close
        assert proc.poll() is None, "the process must still be alive when the canary is refused"
        proxy_bus.publish(
            Stalled(request_id="r", path="/v1/chat/completions", life_id=first, outcome="stall_midstream")
        )
        crash = await rec.wait_for("crash", timeout=5)
        assert crash.detail["exit_code"] == 3 and crash.detail["life_id"] == first
        await _next_ready(rec, first)
    finally:
        await sup.stop()
    canaries = [
        json.loads(r["detail_json"])
        for r in rows(ledger, "SELECT detail_json FROM events WHERE kind = 'canary'")
    ]
    assert [c["ok"] for c in canaries] == [False], canaries
    assert "wedge" not in rec.kinds()
    lives = rows(
        ledger, "SELECT start_reason, end_reason, exit_code FROM server_life_view ORDER BY started_at"
    )
    assert lives[0] == {"start_reason": "run_start", "end_reason": "crash", "exit_code": 3}
