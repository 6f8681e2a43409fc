"""``wedgewatch serve``: a supervised simulator behind the proxy, as a real subprocess."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from conftest import ROOT, launch
from wedgewatch.ledger import Ledger
from wedgewatch.supervisor.process import group_alive
from wedgewatch.testing import eventually

WEDGE = """
[[fault]]
when.contains = "WEDGE"
times = 1
action = "wedge"
after_tokens = 2
"""


def write_config(tmp_path: Path, server: str = "", watchdog: str = "") -> Path:
    (tmp_path / "wedge.toml").write_text(WEDGE)
    cfg = tmp_path / "serve.toml"
    cfg.write_text(
        f"""
[server]
scenario = "{tmp_path / "wedge.toml"}"
time_scale = 20
log_dir = "{tmp_path / "logs"}"
scrape_interval = 0.25
canary_timeout = 1.0
restart_backoff = 0.1
{server}

[watchdog]
{watchdog}

[run]
ledger = "{tmp_path / "ledger.sqlite"}"
"""
    )
    return cfg


def serve(cfg: Path, tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    server = launch(
        [sys.executable, "-m", "wedgewatch", "serve", str(cfg), "--port", "0"],
        tmp_path / "serve.log",
        timeout=60,
    )
    return server.proc, server.url


def interrupt(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    return proc.wait(timeout=30)


def test_serve_runs_behind_the_proxy_and_leaves_no_process_on_ctrl_c(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    proc, url = serve(cfg, tmp_path)
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="sk-never-logged", max_retries=0, timeout=20)
        reply = client.chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": "hi"}], max_tokens=5
        )
        assert reply.choices[0].finish_reason == "length"
        ledger = Ledger(cfg.parent / "ledger.sqlite")
        (life,) = [dict(r) for r in ledger.query("SELECT life_id, pid FROM server_lives")]
        (req,) = [dict(r) for r in ledger.query("SELECT life_id, age_requests FROM requests")]
        assert req["life_id"] == life["life_id"] and req["age_requests"] == 3, "the request knows the age"
        assert group_alive(life["pid"])
    finally:
        code = interrupt(proc)
    assert code == 0
    assert not group_alive(life["pid"]), "no process of the server's group is left"
    end = [dict(r) for r in ledger.query("SELECT end_reason, age_requests FROM server_life_ends")]
    assert end == [{"end_reason": "stop", "age_requests": 4}]
    everything = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert b"sk-never-logged" not in everything


def test_serve_restarts_a_wedged_server_from_a_proxy_stall(tmp_path: Path) -> None:
    # wedge_window far beyond the test: the proxy's stall plus a failed canary find the wedge
    cfg = write_config(
        tmp_path, server="wedge_window = 120", watchdog="ttft_timeout = 1.0\nstall_timeout = 0.5"
    )
    proc, url = serve(cfg, tmp_path)
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=2, timeout=20)
        with pytest.raises(openai.APIError) as info:
            for _ in client.chat.completions.create(
                model="sim-model",
                messages=[{"role": "user", "content": "WEDGE"}],
                max_tokens=100,
                stream=True,
            ):
                pass
        assert info.value.code == "stall_midstream"  # the proxy's stall, not the client's 20 s
        ledger = Ledger(cfg.parent / "ledger.sqlite")
        requests = [r["outcome"] for r in ledger.query("SELECT outcome FROM requests ORDER BY started_at")]
        assert requests[-1:] == ["stall_midstream"] and "stall_midstream" not in requests[:-1]  # no retry

        def two_lives() -> list[dict[str, object]]:
            lives = [dict(r) for r in ledger.query("SELECT * FROM server_life_view ORDER BY started_at")]
            return lives if len(lives) == 2 and lives[1]["ready_at"] is not None else []

        lives = eventually(two_lives, timeout=20, what="a second life, ready")
        assert [x["start_reason"] for x in lives] == ["run_start", "wedge"]
        (wedge,) = [
            json.loads(r["detail_json"]) for r in ledger.query("SELECT * FROM events WHERE kind='wedge'")
        ]
        assert wedge["source"] == "canary" and wedge["trigger"]["event"] == "stall"
        # the new life serves through the same proxy URL
        reply = client.chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        assert reply.choices[0].message.content
    finally:
        assert interrupt(proc) == 0
    assert not any(group_alive(int(str(x["pid"]))) for x in lives)


@pytest.mark.parametrize(
    ("server", "field"),
    [
        ("wedge_window = -1", "server.wedge_window"),
        ('profile = "tgi"', "server.profile"),
        ('arg_sets = ["turbo"]', "server.arg_sets"),
        ("scrape_intervall = 1", "server.scrape_intervall"),
    ],
)
def test_bad_config_fields_exit_2_naming_the_field(tmp_path: Path, server: str, field: str) -> None:
    cfg = write_config(tmp_path, server=server)
    done = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "serve", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and str(cfg) in lines[0]
    assert done.stdout == ""
