"""``wedgewatch proxy`` as a user runs it: a subprocess in front of the simulator, and its bad flags."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import openai
import pytest

from conftest import RunningServer, launch

KEY = "sk-cli-test-SECRET-7777"
SCENARIO = """
[[fault]]
when.contains = "STALL-TTFT"
action = "stall_ttft"
"""


def test_the_cli_proxy_watches_records_jsonl_and_never_logs_the_key(
    start_sim: Callable[..., RunningServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    sim = start_sim("--scenario", str(scenario), "--time-scale", "2")
    records = tmp_path / "rows.jsonl"
    env_log = tmp_path / "proxy.log"
    monkeypatch.setenv("WEDGEWATCH_LOG", "DEBUG")  # the proxy subprocess logs everything it logs
    argv = [sys.executable, "-m", "wedgewatch", "proxy", "--upstream", sim.url + "/v1", "--port", "0"]
    argv += ["--ttft-timeout", "1", "--stall-timeout", "1", "--records", str(records)]
    proxy = launch(argv, env_log)
    try:
        assert proxy.url.startswith("http://127.0.0.1:")
        client = openai.OpenAI(base_url=proxy.url + "/a/cli-1/v1", api_key=KEY)
        res = client.chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        assert res.usage is not None and res.usage.completion_tokens == 4
        status = json.loads(urllib.request.urlopen(proxy.url + "/wedgewatch/status", timeout=5).read())
        assert status["loop"] == "uvloop" and status["in_flight"] == []
        with pytest.raises(openai.InternalServerError) as info:
            client.chat.completions.create(  # a stream: its first-token deadline is the flag's
                model="sim-model", messages=[{"role": "user", "content": "STALL-TTFT"}], stream=True
            )
        assert info.value.body["code"] == "stall_ttft"  # type: ignore[index]
        assert "(ttft_timeout 1 s)" in info.value.body["message"]  # type: ignore[index]  # the flag's
        rows = [json.loads(line) for line in records.read_text().splitlines()]
        assert [(r["outcome"], r["attempt_id"]) for r in rows] == [("ok", "cli-1"), ("stall_ttft", "cli-1")]
    finally:
        proxy.stop()
    log = proxy.log()
    # It did log, at debug level, each request (the healthy one too) with its attempt.
    assert "DEBUG wedgewatch.proxy.exchange: request" in log and "(attempt cli-1): ok" in log
    assert "(attempt cli-1): stall_ttft" in log
    assert KEY not in log and KEY not in records.read_text()


def test_standalone_proxy_with_metrics_url_ends_requests_when_the_engine_stops(
    start_sim: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """`--metrics-url`: the proxy scrapes the heartbeat itself; a wedged engine (everything frozen,
    /health still 200) ends the request in flight within --heartbeat-window plus two scrapes."""
    sim = start_sim("--scenario", "wedge-all", "--time-scale", "5")
    argv = [sys.executable, "-m", "wedgewatch", "proxy", "--upstream", sim.url, "--port", "0"]
    argv += ["--metrics-url", sim.url + "/metrics", "--scrape-interval", "0.2", "--heartbeat-window", "1.6"]
    proxy = launch(argv, tmp_path / "proxy.log")
    try:
        status = json.loads(urllib.request.urlopen(proxy.url + "/wedgewatch/status", timeout=5).read())
        assert status["deadlines"] == "engine"
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="unused", max_retries=0, timeout=30)
        tokens = 0
        with pytest.raises(openai.APIError) as info:
            for chunk in client.chat.completions.create(
                model="sim-model", messages=[{"role": "user", "content": "WEDGE"}], max_tokens=50, stream=True
            ):
                if chunk.choices and chunk.choices[0].delta.content:
                    tokens += 1
        assert info.value.body["code"] == "stall_midstream"  # type: ignore[index]
        # The engine-stopped verdict (not a request deadline) ended it, once nothing had moved for
        # the whole window; how soon after, on real time, is `wedgewatch bench detection`'s.
        message = info.value.body["message"]  # type: ignore[index]
        found = re.search(
            r"engine stopped: nothing moved for ([0-9.]+) s .*\(heartbeat_window 1.6 s\)", message
        )
        assert found is not None and float(found.group(1)) >= 1.6 - 0.05, message  # shown to 0.1 s
        assert f"after {tokens} tokens" in message and tokens > 0
    finally:
        proxy.stop()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--upstream", "http://127.0.0.1:9", "--ttft-timeout", "0"], "--ttft-timeout"),
        (["--upstream", "http://127.0.0.1:9", "--min-rate", "-1"], "--min-rate"),
        (["--upstream", "http://127.0.0.1:9", "--total-timeout", "soon"], "--total-timeout"),
        (["--upstream", "127.0.0.1:8000"], "--upstream"),
        (["--upstream", "http://127.0.0.1:9", "--port", "99999"], "--port"),
        (["--ttft-timeout", "5"], "--upstream"),
        (["--upstream", "http://127.0.0.1:9", "--metrics-url", "127.0.0.1:9/metrics"], "--metrics-url"),
        (["--upstream", "http://127.0.0.1:9", "--heartbeat-window", "0"], "--heartbeat-window"),
        (["--upstream", "http://127.0.0.1:9", "--engine-stall-timeout", "0"], "--engine-stall-timeout"),
    ],
)
def test_bad_flags_exit_2_with_one_line_naming_the_flag(flags: list[str], named: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "proxy", *flags], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], lines
    assert done.stdout == ""
