"""The heartbeat rules as pure decisions: readings and a ``now`` in, verdicts out (manual clock)."""

from __future__ import annotations

from wedgewatch.config import Config, ServerConfig, WatchdogConfig, validate
from wedgewatch.proxy.deadlines import STALL_MIDSTREAM, STALL_TTFT, Watch, engine_deadlines
from wedgewatch.proxy.engine_time import Scraper, read_any
from wedgewatch.supervisor import profiles
from wedgewatch.supervisor.detector import WedgeDetector
from wedgewatch.wire.heartbeat import EngineClock, Feed, Reading
from wedgewatch.wire.promtext import parse


def r(
    at: float, tokens: float, beat: float, running: float = 1, waiting: float = 0, pre: float = 0
) -> Reading:
    return Reading(at, at, tokens, tokens, running, waiting, (beat,), pre)


def test_heartbeat_rule_keeps_a_long_prefill_alive_and_the_tokens_rule_does_not() -> None:
    hb, tok = WedgeDetector(8.0, heartbeat=True), WedgeDetector(8.0, heartbeat=False)
    fired_hb = fired_tok = None
    for t in range(0, 61):  # 60 s of prefill: tokens flat, the KV usage moving every second
        reading = r(float(t), 100.0, 0.01 * t)
        fired_hb = fired_hb or hb.observe(reading)
        fired_tok = fired_tok or tok.observe(reading)
    assert fired_hb is None
    assert fired_tok is not None and fired_tok["rule"] == "tokens" and fired_tok["flat_seconds"] >= 8.0


def test_heartbeat_rule_fires_at_its_window_after_the_last_beat() -> None:
    d = WedgeDetector(8.0, heartbeat=True)
    for t in range(5):
        assert d.observe(r(float(t), 10.0 + t, float(t))) is None
    fired = [t for t in range(5, 20) if d.observe(r(float(t), 14.0, 4.0))]
    assert fired[0] == 12  # the last movement was at t=4


def test_a_queue_that_nothing_serves_is_a_wedge_only_for_the_heartbeat_rule() -> None:
    hb, tok = WedgeDetector(5.0, heartbeat=True), WedgeDetector(5.0, heartbeat=False)
    got_hb = got_tok = None
    for t in range(12):
        reading = r(float(t), 50.0, 0.3, running=0, waiting=4)
        got_hb = got_hb or hb.observe(reading)
        got_tok = got_tok or tok.observe(reading)
    assert got_hb is not None and got_hb["waiting"] == 4
    assert got_tok is None  # running 0: the old rule sees an idle server


def test_unreachable_metrics_with_work_is_a_wedge_at_the_window() -> None:
    d = WedgeDetector(8.0, heartbeat=True)
    d.observe(r(0.0, 1.0, 0.0))
    d.observe(r(1.0, 2.0, 0.1))  # the last movement
    assert d.unreachable(8.5) is None
    ev = d.unreachable(9.2)
    assert ev is not None and ev["unreachable"] is True and ev["flat_seconds"] >= 8.0
    idle = WedgeDetector(8.0, heartbeat=True)
    idle.observe(r(0.0, 1.0, 0.0, running=0))
    assert idle.unreachable(60.0) is None  # nothing was running: a canary decides instead
    assert WedgeDetector(8.0).unreachable(60.0) is None  # the tokens rule keeps its canary path


def cfg(**kw: float) -> WatchdogConfig:
    return WatchdogConfig(**kw)


def test_engine_deadlines_ignore_queued_time_and_count_stepping_time() -> None:
    w = Watch(cfg(), 0.0, engine=True)
    now = 0.0
    for _ in range(600):  # ten minutes queued: never a stall
        now += 1.0
        assert w.charge(now, 1.0, True, queued=True) is None
    assert w.deadline()[0] >= 600 + WatchdogConfig().total_timeout  # queued time extends the total
    for _ in range(119):  # two minutes of the engine stepping with this request running, no token
        now += 1.0
        assert w.charge(now, 1.0, True, queued=False) is None
    for _ in range(50):  # the engine not stepping: the clock stands still
        now += 1.0
        assert w.charge(now, 1.0, False, queued=False) is None
    now += 1.0
    stall = w.charge(now, 1.0, True, queued=False)
    assert stall is not None and stall.kind == STALL_TTFT and "engine_ttft_timeout 120" in stall.message


def test_engine_stall_mid_stream_and_a_preemption_resets_to_the_first_token_budget() -> None:
    w = Watch(cfg(), 0.0, engine=True)
    w.progress(1.0)
    for i in range(9):
        assert w.charge(2.0 + i, 1.0, True, queued=False) is None
    stall = w.charge(11.0, 1.0, True, queued=False)
    assert stall is not None and stall.kind == STALL_MIDSTREAM and "engine_stall_timeout 10" in stall.message
    p = Watch(cfg(), 0.0, engine=True)
    p.progress(1.0)
    assert p.charge(2.0, 1.0, True, queued=False, preempted=True) is None
    for i in range(60):  # prefilling again after the preemption: 60 s is no mid-stream stall
        assert p.charge(3.0 + i, 1.0, True, queued=False) is None
    p.progress(70.0)  # the next token: back to the mid-stream budget
    assert all(p.charge(71.0 + i, 1.0, True, queued=False) is None for i in range(9))
    assert p.charge(81.0, 1.0, True, queued=False) is not None


def test_wall_watch_ignores_charges() -> None:
    w = Watch(cfg(), 0.0)
    assert w.charge(500.0, 500.0, True, queued=False) is None
    assert w.deadline() == (60.0, STALL_TTFT)


def test_engine_clock_ticks() -> None:
    c = EngineClock()
    assert c.observe(r(0.0, 1.0, 0.0)).dt == 0.0
    t = c.observe(r(1.0, 1.0, 0.5, waiting=2, pre=1))
    assert (t.dt, t.stepping, t.waiting, t.preempted, t.still_for) == (1.0, True, 2, 1, 0.0)
    t = c.observe(r(3.0, 1.0, 0.5, pre=1))
    assert not t.stepping and t.still_for == 2.0
    assert c.observe(r(4.0, 1.0, 0.5), life_id="other").dt == 0.0  # a new life starts afresh


def test_which_rules_a_config_gets() -> None:
    sim = profiles.get_profile("sim")
    new = ServerConfig()
    old = ServerConfig(wedge_window=60.0)
    assert profiles.heartbeat_rule(new, profiles.series(new, sim))
    assert not profiles.heartbeat_rule(old, profiles.series(old, sim))
    cmd = ServerConfig(profile="command", command=["x"])
    assert not profiles.heartbeat_rule(cmd, profiles.series(cmd, profiles.get_profile("command")))
    assert engine_deadlines(WatchdogConfig(), True)
    assert not engine_deadlines(WatchdogConfig(), False)
    assert not engine_deadlines(WatchdogConfig(ttft_timeout=60.0), True)
    assert engine_deadlines(WatchdogConfig(ttft_timeout=60.0, deadlines="engine"), True)
    # A config rebuilt from its snapshot (resume, the effective config) decides the same way.
    written = validate({"server": {"wedge_window": 30.0}, "watchdog": {"stall_timeout": 5.0}}, "t")
    again = Config.model_validate(written.snapshot())
    assert again.server.detection == "tokens" and again.watchdog.deadlines == "wall"
    fresh = Config.model_validate(Config().snapshot())
    assert fresh.server.detection == "heartbeat" and fresh.watchdog.deadlines == "engine"


def test_standalone_scraper_reads_any_server_and_stops_once_per_still_stretch() -> None:
    text = (
        "vllm:num_requests_running 2\nvllm:num_requests_waiting 1\n"
        "vllm:kv_cache_usage_perc 0.25\nvllm:generation_tokens_total 10\n"
        "vllm:prompt_tokens_total 5\nvllm:num_preemptions_total 3\n"
    )
    got = read_any(parse(text), 1.0)
    assert (got.tokens, got.running, got.waiting, got.beat, got.preemptions) == (15.0, 2.0, 1.0, (0.25,), 3.0)
    feed = Feed(8.0)
    stops: list[dict[str, object]] = []
    feed.subscribe(lambda *_: None, lambda ev, _life: stops.append(ev))
    s = Scraper("http://127.0.0.1:1/metrics", feed, 1.0)
    assert s.observe(r(0.0, 1.0, 0.0), 0.0) is None
    assert s.observe(r(1.0, 2.0, 0.1), 1.0) is None  # the last movement
    for t in range(2, 9):
        assert s.observe(r(float(t), 2.0, 0.1), float(t)) is None
    assert s.observe(None, 9.5) is not None  # /metrics silent: the stretch goes on
    assert s.observe(None, 12.0) is None and len(stops) == 1
    assert s.observe(r(13.0, 3.0, 0.2), 13.0) is None  # moving again
    # Frozen just after a request arrived: the last reading had no work, /metrics never answers
    # again. With the proxy's requests in flight that is the still stretch, from that reading.
    in_flight = [False]
    s = Scraper("http://127.0.0.1:1/metrics", feed, 1.0, busy=lambda: in_flight[0])
    assert s.observe(r(20.0, 5.0, 0.3, running=0), 20.0) is None
    assert s.observe(None, 21.0) is None  # silent but idle: nothing to judge
    in_flight[0] = True
    assert s.observe(None, 27.9) is None  # 7.9 s since the reading: inside the window
    assert s.observe(None, 28.0) == {"source": "proxy", "flat_seconds": 8.0, "window": 8.0}
    assert s.observe(None, 29.0) is None and len(stops) == 2  # once per still stretch


def test_bench_percentiles_and_the_longest_still_stretch() -> None:
    from wedgewatch.bench.detection import Watcher, percentiles

    assert percentiles([]) == {"n": 0}
    got = percentiles([float(i) for i in range(1, 101)])
    assert got == {"n": 100, "p50": 50.0, "p99": 99.0, "max": 100.0}
    w = Watcher()
    beats = [0.0, 0.1, 0.1, 0.1, 0.1, 0.2, 0.3]  # still from t=1 to t=4 with work running
    w.readings = [(float(t), r(float(t), 1.0, b), "life") for t, b in enumerate(beats)]
    assert w.max_still() == 3.0
    assert w.last_beat(before=6.0, after=0.0) == 6.0 and w.last_beat(before=4.5, after=0.0) == 1.0


def test_a_full_server_skips_the_canary_only_while_it_moves() -> None:
    from wedgewatch.supervisor.life import Life
    from wedgewatch.supervisor.process import AdoptedServer

    d = WedgeDetector(8.0, heartbeat=True)
    life = Life("life-t", AdoptedServer("http://127.0.0.1:1", None), [], "t", 0.0, d, concurrency=2)
    for t, beat in ((0.0, 0.0), (1.0, 0.5)):
        life.reading = r(t, 5.0 + t, beat, running=2, waiting=3)
        d.observe(life.reading)
    assert life.at_limit()  # full and busy: a canary would only queue
    life.reading = r(2.0, 6.0, 0.5, running=2, waiting=3)
    d.observe(life.reading)
    assert not life.at_limit()  # full and nothing moved: not busy, stuck; the canary must run
