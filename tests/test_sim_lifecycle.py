"""The wedge, the SDK retry trap, start-up and signals, observed from outside."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from test_sim_support import Stream, chat_body, client, gauge, stats
from wedgewatch.testing import eventually


def test_scripted_wedge_freezes_tokens_but_not_health(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "keywords", "--time-scale", "2")  # 100 tokens/s
    long = Stream(s.url, chat_body("a long answer", max_tokens=2000))
    assert long.read(0.3) == "busy" and long.content()
    wedge = Stream(s.url, chat_body("WEDGE"))
    assert wedge.read() == "timeout" and len(wedge.content()) == 3
    assert long.read(1.0) == "timeout"  # the healthy stream froze too
    info = stats(s.url)
    assert info["wedged"] and info["wedge_cause"] == "scripted"
    before = gauge(s.url, "vllm:generation_tokens_total")
    late = Stream(s.url, chat_body("a new request"))
    assert late.read(0.6) == "timeout" and late.content() == []
    for path in ("/health", "/version", "/v1/models"):
        assert httpx.get(s.url + path, timeout=5).status_code == 200
    time.sleep(0.3)  # frozen counters must stay frozen: only time passing can show it
    assert gauge(s.url, "vllm:generation_tokens_total") == before
    assert gauge(s.url, "vllm:num_requests_running") == 2
    # clients giving up do not unfreeze the engine's gauges
    for st in (long, wedge, late):
        st.close()
    eventually(lambda: stats(s.url)["in_flight"] == 0)
    assert gauge(s.url, "vllm:num_requests_running") == 2


def test_stochastic_wedge_under_load(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "wedge-under-load", "--time-scale", "5", "--seed", "1")
    c = client(s.url)
    r = c.chat.completions.create(
        model="sim-model", messages=[{"role": "user", "content": "one"}], max_tokens=10
    )
    assert r.choices[0].finish_reason == "length" and not stats(s.url)["wedged"]
    streams = [Stream(s.url, chat_body(f"load {i}", max_tokens=400)) for i in range(3)]
    for st in streams:
        st.read(0.2)
    eventually(lambda: stats(s.url)["wedged"], timeout=5)
    assert stats(s.url)["wedge_cause"] == "stochastic"
    before = gauge(s.url, "vllm:generation_tokens_total")  # frozen at the wedge
    time.sleep(0.5)  # frozen counters must stay frozen: only time passing can show it
    assert gauge(s.url, "vllm:generation_tokens_total") == before
    assert gauge(s.url, "vllm:num_requests_running") > 0
    assert httpx.get(s.url + "/health", timeout=5).status_code == 200
    for st in streams:
        assert st.read(2.0) == "timeout"  # drains what came before the wedge, then silence
        st.close()


def test_the_sdk_retry_trap(start_sim) -> None:  # type: ignore[no-untyped-def]
    """Default max_retries=2 against a stalled server: 3 requests, about 3 x timeout, then an error."""
    s = start_sim("--scenario", "stall-all")
    timeout = 1.0
    c = openai.OpenAI(base_url=s.v1, api_key="sk-test", timeout=timeout)  # max_retries left at 2
    t0 = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        c.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": "fix the bug"}])
    took = time.monotonic() - t0
    # The trap is the time: three whole client timeouts (and two backoffs). Only the lower bound
    # is asserted: a busy machine can only add to it.
    assert took > 3 * timeout
    eventually(lambda: stats(s.url)["aborted"] == 3)
    info = stats(s.url)
    assert info["received"] == 3 and info["by_path"] == {"/v1/chat/completions": 3}


def test_unready_startup(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "unready", "--time-scale", "5")  # 1 s unready
    assert httpx.get(s.url + "/health", timeout=5).status_code == 503
    r = httpx.post(s.v1 + "/chat/completions", json=chat_body("x", stream=False), timeout=5)
    assert r.status_code == 503 and r.json()["error"]["code"] == 503
    eventually(lambda: httpx.get(s.url + "/health", timeout=5).status_code == 200, timeout=5)
    assert httpx.get(s.url + "/health", timeout=5).json() == {}


def test_exit_at_start_and_bad_scenario(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "sim", "--port", "0", "--scenario", "exit-at-start"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 3 and p.stdout == ""
    bad = tmp_path / "bad.toml"
    bad.write_text('[[fault]]\naction = "explode"\n')
    p = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "sim", "--port", "0", "--scenario", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "fault[0].action" in lines[0]
    bad.write_text("[startup]\nunready_seconds = -1\n")
    p = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "sim", "--port", "0", "--scenario", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2 and "startup.unready_seconds" in p.stderr


def test_sigterm_exits_cleanly_unless_ignored(start_sim) -> None:  # type: ignore[no-untyped-def]
    s = start_sim("--scenario", "stall-all")
    hold = Stream(s.url, chat_body("stuck"))  # a stalled request must not block the exit
    hold.read(0.3)
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=5) == 0
    hold.close()
    stubborn = start_sim("--scenario", "ignore-sigterm")
    stubborn.proc.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        stubborn.proc.wait(timeout=0.7)
    assert httpx.get(stubborn.url + "/health", timeout=5).status_code == 200
    stubborn.proc.send_signal(signal.SIGINT)
    assert stubborn.proc.wait(timeout=5) == 0
