"""The fault corpus of docs/faults.md, each fault at wedgewatch's default settings: a real simulator
subprocess reproducing what the public report shows, the real supervised stack in front of it
(``wedgewatch.bench.rig.trial``, the rig ``wedgewatch bench faults`` measures with), and what came
of it: the request's outcome, what the client read, the supervisor's events and their evidence.
No wall-clock bound is asserted (the bench measures the seconds); waits are hang guards.

vLLM #46811 (a wedge whose gauges read 0 running, 0 waiting) is here at defaults, resumed; how
soon it is found without the resume is tests/test_wedge_gauges_zero.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from conftest import RunningServer
from wedgewatch.base import vocab
from wedgewatch.base.events import CanaryAnswered, Crashed, Restarting, Wedged
from wedgewatch.bench.fault_corpus import CORPUS, by_name
from wedgewatch.bench.faults import met
from wedgewatch.bench.rig.client import read_answer, send_half
from wedgewatch.bench.rig.trial import FaultRig, Trial
from wedgewatch.config import ServerConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.proxy import Proxy
from wedgewatch.testing import ManualClock, eventually_async

RESTARTED = [Wedged.kind, Restarting.kind]


async def one_trial(name: str, tmp_path: Path) -> Trial:
    fault = by_name(name)
    async with FaultRig(fault, tmp_path / "rig") as rig:
        trial = await rig.trial()
    assert trial.missing == [], f"{name}: never saw {trial.missing}"
    assert trial.outcome == fault.expect, f"{name}: {trial}"
    assert met(fault, trial), f"{name}: {trial}"
    assert trial.release is not None
    return trial


def whole_answer_after_a_resume(t: Trial) -> None:
    """The client read one whole answer (its finish, no error) although its first leg met the wedge:
    the proxy sent the request on to the next life (``on_wedge = "resume"``, the default)."""
    assert (t.status, t.client_code, t.finish) == (200, "", "length"), t
    assert t.legs == [vocab.RESUMED, vocab.OK] and t.cause == vocab.STALL_MIDSTREAM, t


def test_every_fault_names_its_report_scenario_and_an_outcome_of_the_vocabulary() -> None:
    from wedgewatch.sim.scenario import bundled_names

    words = vocab.INFRA_OUTCOMES | {vocab.OK, vocab.CLIENT_SLOW_BODY, vocab.RESUMED}
    for fault in CORPUS:
        assert fault.scenario in bundled_names(), fault.name
        assert fault.expect in words, fault.name
        assert (fault.expect == vocab.RESUMED) == bool(fault.escaped), fault.name
        assert fault.source.startswith("https://github.com/") or fault.rig == "client", fault.name
    assert len({f.name for f in CORPUS}) == len(CORPUS)


@pytest.mark.long
async def test_vllm_46811_a_wedge_whose_gauges_read_0_is_found_and_resumed_at_defaults(
    tmp_path: Path,
) -> None:
    t = await one_trial("vLLM #46811", tmp_path)
    assert t.probe["health"] == 200
    whole_answer_after_a_resume(t)
    assert [k for k in t.events if k in RESTARTED] == RESTARTED
    # The gauges denied any work: the proxy's own request on the life is what made it a wedge.
    assert (t.evidence["running"], t.evidence["waiting"]) == (0, 0)
    assert t.evidence["rule"] == "heartbeat" and t.evidence["window"] == ServerConfig().heartbeat_window
    assert t.next_served is True


@pytest.mark.long
async def test_vllm_36451_an_engine_hung_mid_decode_is_a_wedge_at_defaults(tmp_path: Path) -> None:
    t = await one_trial("vLLM #36451", tmp_path)
    assert t.probe["health"] == 200  # what the report says: /health stays 200
    whole_answer_after_a_resume(t)
    assert [k for k in t.events if k in RESTARTED] == RESTARTED
    assert t.evidence["rule"] == "heartbeat" and t.evidence["window"] == ServerConfig().heartbeat_window
    assert t.evidence["running"] == 1  # the gauges froze with the request running
    assert t.next_served is True


@pytest.mark.long
async def test_vllm_45526_an_engine_hung_in_a_prefill_is_a_wedge_before_any_token(tmp_path: Path) -> None:
    t = await one_trial("vLLM #45526", tmp_path)
    assert t.probe["health"] == 200
    # No token had reached the client: the request went again whole to the next life, one row.
    assert (t.status, t.client_code, t.finish, t.legs) == (200, "", "length", [vocab.OK]), t
    assert [k for k in t.events if k in RESTARTED] == RESTARTED
    assert t.evidence["rule"] == "heartbeat"
    assert t.next_served is True


async def test_vllm_48966_an_engine_death_with_exit_status_0_is_a_crash(tmp_path: Path) -> None:
    t = await one_trial("vLLM #48966", tmp_path)
    # The engine's error event is held, not passed on: its /health refused, the request goes on,
    # on the next life, and the client reads the whole answer (proxy/resume/blame.py).
    assert (t.status, t.client_code, t.finish) == (200, "", "length"), t
    assert t.legs == [vocab.RESUMED, vocab.OK] and t.cause == vocab.STREAM_ERROR_EVENT, t
    assert Crashed.kind in t.events and Restarting.kind in t.events
    assert Wedged.kind not in t.events
    assert t.exit_code == 0  # a clean exit is still the server's death
    assert t.next_served is True


@pytest.mark.long
async def test_sglang_22511_a_long_chunked_prefill_is_no_alarm_though_health_says_503(tmp_path: Path) -> None:
    t = await one_trial("SGLang #22511", tmp_path)
    assert 503 in t.probe["health"], t.probe  # SGLang's false unhealthy, reproduced
    assert (t.status, t.client_code) == (200, "")  # the request was answered
    assert t.events == []  # no canary, no wedge, no restart


@pytest.mark.long
async def test_mlx_lm_1493_a_livelock_fails_the_canary_and_is_restarted(tmp_path: Path) -> None:
    t = await one_trial("mlx-lm #1493", tmp_path)
    assert t.probe["health"] == 200
    # The engine steps on (the heartbeat moves): the request's engine-time deadline ends it, and the
    # canary its stall sends gets no token either.
    assert (t.status, t.client_code) == (200, vocab.STALL_MIDSTREAM)
    assert t.events[:2] == [CanaryAnswered.kind, Wedged.kind] and Restarting.kind in t.events
    assert t.canary_passed is False and t.evidence["source"] == vocab.CANARY
    assert t.next_served is True


@pytest.mark.long
async def test_llamacpp_27388_health_ok_slots_hanging_and_sigterm_ignored(tmp_path: Path) -> None:
    t = await one_trial("llama.cpp #27388", tmp_path)
    assert t.probe == {"health": 200, "slots": "no answer"}
    whole_answer_after_a_resume(t)
    assert [k for k in t.events if k in RESTARTED] == RESTARTED
    assert t.old_exit == -9  # SIGTERM was ignored: the stop escalated to SIGKILL
    assert t.next_served is True


BROKEN = {
    # fault: (the HTTP status the client got, the code it read)
    "HTML 200": (502, vocab.REPLY_NOT_SSE),
    "non-JSON data line": (200, vocab.REPLY_NOT_JSON),
    "engine error event": (200, "500"),  # the server's own event, passed on as it came
    "stream without a finish": (200, vocab.STREAM_UNFINISHED),
    "endless line": (200, vocab.REPLY_TOO_LARGE),
}


async def test_each_broken_reply_is_the_servers_failure_and_no_restart(tmp_path: Path) -> None:
    # One healthy server shows every broken reply (the scenario picks one by a keyword).
    scenarios = {by_name(name).scenario for name in BROKEN}
    assert scenarios == {"broken-replies"}
    async with FaultRig(by_name("HTML 200"), tmp_path / "rig") as rig:
        for name, (status, code) in BROKEN.items():
            t = await rig.trial(by_name(name))
            assert t.outcome == by_name(name).expect and vocab.is_infra_outcome(t.outcome), (name, t)
            assert (t.status, t.client_code) == (status, code), name
            # The proxy's upstream error asks a canary; the healthy server passes it.
            assert t.events == [CanaryAnswered.kind] and t.canary_passed is True, (name, t)


async def test_a_slow_client_is_the_clients_fault_at_defaults(
    start_sim: Callable[..., RunningServer], tmp_path: Path
) -> None:
    sim = start_sim("--scenario", by_name("slow client").scenario)
    defaults = WatchdogConfig()
    clock = ManualClock()  # the 60 s body_timeout passes on the clock, not in real time
    with Ledger(tmp_path / "l.sqlite") as ledger:
        proxy = Proxy(sim.url, defaults, ledger=ledger, clock=clock)
        await proxy.start()
        try:
            reader, writer = await send_half(proxy.url)
            await eventually_async(lambda: proxy.in_flight() == 1, what="the request in flight")
            await clock.advance(defaults.body_timeout - 1)
            assert proxy.in_flight() == 1  # the client's time, not yet spent
            await clock.advance(2)
            status, _, body = await read_answer(reader)
            writer.close()
            assert status == 408 and json.loads(body)["error"]["code"] == vocab.CLIENT_SLOW_BODY
            await eventually_async(lambda: ledger.query("SELECT outcome FROM requests"), what="the row")
            ((outcome,),) = ledger.query("SELECT outcome FROM requests")
            assert outcome == vocab.CLIENT_SLOW_BODY and not vocab.is_infra_outcome(outcome)
            async with aiohttp.ClientSession() as s, s.get(sim.url + "/sim/stats") as r:
                assert (await r.json())["received"] == 0  # the server never had the request
        finally:
            await proxy.stop()


def test_bench_faults_prints_the_row_of_a_fault_and_refuses_an_unknown_one() -> None:
    import subprocess
    import sys

    from conftest import ROOT

    cmd = [sys.executable, "-m", "wedgewatch", "bench", "faults"]
    out = subprocess.run(
        [*cmd, "--trials", "1", "--fault", "HTML 200"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    (row,) = [ln for ln in out.stdout.splitlines() if ln.startswith("| HTML 200 |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2].startswith("HTTP 502 reply_not_sse") and cells[3] == vocab.REPLY_NOT_SSE, row
    bad = subprocess.run([*cmd, "--fault", "no such fault"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "--fault: no fault 'no such fault'" in bad.stderr
