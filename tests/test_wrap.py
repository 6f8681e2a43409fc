"""``wedgewatch wrap`` as a real subprocess around real harness processes (small Python scripts
using the OpenAI SDK), in front of the supervised simulator: exit codes, the harness-run rows,
the environment and ``{placeholders}``, and no process left behind however it ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from wedgewatch.ledger import Ledger, checks
from wedgewatch.supervisor.process import group_alive
from wedgewatch.testing import eventually
from wedgewatch.wire import fingerprint

KEY = "sk-wrap-secret-never-written-4242"

HARNESS = """
import json, os, sys, time, openai
out = sys.argv[1]
client = openai.OpenAI()  # its defaults: OPENAI_BASE_URL and OPENAI_API_KEY from the environment
reply = client.chat.completions.create(
    model="sim-model", messages=[{"role": "user", "content": "say something short, please"}], max_tokens=4,
    extra_headers={"x-wedgewatch-tag": "inst-7"},  # a harness that can add a header
)
seen = {k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "HOSTED_VLLM_API_BASE",
                                       "VLLM_BASE_URL", "WEDGEWATCH_BASE_URL", "MYSVC_BASE_URL")}
json.dump({"argv": sys.argv[2:], "env": seen, "finish": reply.choices[0].finish_reason,
           "pid": os.getpid()}, open(out, "w"))
if "--sleep" in sys.argv:
    print("sleeping", flush=True)
    time.sleep(600)  # a harness busy until it is stopped or killed: the subject of the tests
sys.exit(int(os.environ.get("HARNESS_EXIT", "0")))
"""


def write_config(tmp_path: Path, scale: str = "server") -> Path:
    """``scale``: the section that sets ``time_scale = 20``: the simulator's own, or ``[run]``'s,
    as the example config does, which wrap applies as ``run`` does."""
    cfg = tmp_path / "wrap.toml"
    cfg.write_text(
        f"""
[server]
log_dir = "{tmp_path / "logs"}"
scrape_interval = 0.25

[run]
ledger = "{tmp_path / "ledger.sqlite"}"
"""
    )
    cfg.write_text(cfg.read_text().replace(f"[{scale}]\n", f"[{scale}]\ntime_scale = 20\n"))
    (tmp_path / "harness.py").write_text(HARNESS)
    return cfg


def wrap_argv(cfg: Path, *harness: str, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "wedgewatch", "wrap", str(cfg), *extra, "--", sys.executable, *harness]


def test_wrap_runs_the_harness_against_the_proxy_and_exits_with_its_code(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, scale="run")
    out = tmp_path / "seen.json"
    env = {**os.environ, "HARNESS_EXIT": "3", "OPENAI_API_KEY": KEY}
    argv = wrap_argv(
        cfg, str(tmp_path / "harness.py"), str(out), "--api-base={base_url}", "--api-key", KEY,
        extra=("--env-prefix", "mysvc"),
    )  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    seen = json.loads(out.read_text())
    base = seen["env"]["OPENAI_BASE_URL"]
    assert base.startswith("http://127.0.0.1:") and base.endswith("/v1")
    assert set(seen["env"].values()) == {base}, "every base-URL variable points at the proxy"
    assert seen["argv"] == [f"--api-base={base}", "--api-key", KEY]
    assert seen["finish"] == "length"
    ledger = Ledger(tmp_path / "ledger.sqlite")
    (run,) = [dict(r) for r in ledger.query("SELECT * FROM harness_runs")]
    (end,) = [dict(r) for r in ledger.query("SELECT * FROM harness_run_ends")]
    assert json.loads(run["argv_json"])[-2:] == ["--api-key", "***"]
    written_cfg = json.loads(run["config_json"])  # as written; the simulator ran at run.time_scale
    assert run["base_url"] == base and written_cfg["run"]["time_scale"] == 20
    assert written_cfg["server"]["time_scale"] == 1
    assert end["exit_code"] == 3 and end["end_reason"] == "exited"
    assert end["ended_at"] >= run["started_at"]
    lives = [dict(r) for r in ledger.query("SELECT * FROM server_life_view")]
    assert [life["run_id"] for life in lives] == [run["harness_run_id"]]
    assert lives[0]["end_reason"] == "stop" and not group_alive(lives[0]["pid"])
    argv = json.loads(lives[0]["argv_json"])
    assert argv[argv.index("--time-scale") + 1] == "20.0" and argv[argv.index("--seed") + 1] == "0"
    (req,) = [dict(r) for r in ledger.query("SELECT * FROM requests")]
    assert req["outcome"] == "ok" and req["life_id"] == lives[0]["life_id"]
    assert req["attempt_id"] == "inst-7", "the tag header names the instance"
    fp = json.loads(req["detail_json"])["fp"]
    assert fp["lines"] == fingerprint.line_hashes("say something short, please") and len(fp["messages"]) == 1
    assert checks.problems(ledger) == []  # the same checks as a run's ledger (test_runner_sim.py)
    ledger.close()
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name not in ("harness.py", "seen.json")]
    assert any(p.suffix == ".sqlite" for p in written) and any(p.parent.name == "logs" for p in written)
    for path in written:
        assert KEY.encode() not in path.read_bytes(), f"the API key is in {path}"
    assert KEY not in done.stderr + done.stdout


def test_wrap_substitutes_rerun_and_refuses_it_without_a_file(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    out = tmp_path / "seen.json"
    rerun = tmp_path / "rerun.txt"
    rerun.write_text("inst-a\ninst-b\n")
    harness = (str(tmp_path / "harness.py"), str(out), "--ids", "{rerun}", "--joined={rerun}")
    done = subprocess.run(
        wrap_argv(cfg, *harness, extra=("--rerun", str(rerun), "--tag", "inst-9")), timeout=120
    )
    assert done.returncode == 0
    seen = json.loads(out.read_text())
    assert seen["argv"] == ["--ids", "inst-a", "inst-b", "--joined=inst-a,inst-b"]
    assert seen["env"]["OPENAI_BASE_URL"].endswith("/a/inst-9/v1")
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        (tag,) = [r[0] for r in ledger.query("SELECT attempt_id FROM requests")]
    assert tag == "inst-9", "the path's tag, which outranks the header's"
    bad = subprocess.run(wrap_argv(cfg, *harness), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--rerun" in bad.stderr


def _lives(tmp_path: Path) -> list[dict[str, object]]:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    try:
        return [dict(r) for r in ledger.query("SELECT * FROM server_life_view")]
    finally:
        ledger.close()


def _started(tmp_path: Path, wrapper: subprocess.Popen[str]) -> int:
    """Wait for the harness to be asleep after its request; return its pid."""
    assert wrapper.stdout is not None
    assert wrapper.stdout.readline().strip() == "sleeping"
    return int(json.loads((tmp_path / "seen.json").read_text())["pid"])


def test_ctrl_c_stops_harness_and_server_and_exits_130(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    argv = wrap_argv(cfg, str(tmp_path / "harness.py"), str(tmp_path / "seen.json"), "--sleep")
    wrapper = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        harness_pid = _started(tmp_path, wrapper)
        wrapper.send_signal(signal.SIGINT)
        assert wrapper.wait(timeout=60) == 130
    finally:
        wrapper.kill()
    assert not group_alive(harness_pid), "the harness's group is gone"
    (life,) = _lives(tmp_path)
    assert life["end_reason"] == "stop" and not group_alive(int(str(life["pid"])))
    ledger = Ledger(tmp_path / "ledger.sqlite")
    (end,) = [dict(r) for r in ledger.query("SELECT * FROM harness_run_ends")]
    assert end["end_reason"] == "interrupted" and end["exit_code"] == 130  # SIGINT: 128 + 2
    ledger.close()


def test_a_killed_harness_leaves_no_server_behind(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    argv = wrap_argv(cfg, str(tmp_path / "harness.py"), str(tmp_path / "seen.json"), "--sleep")
    wrapper = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        harness_pid = _started(tmp_path, wrapper)
        (life,) = _lives(tmp_path)
        assert group_alive(int(str(life["pid"])))
        os.kill(harness_pid, signal.SIGKILL)
        assert wrapper.wait(timeout=60) == 128 + signal.SIGKILL  # at its harness's death, not later
    finally:
        wrapper.kill()
    (life,) = _lives(tmp_path)
    assert life["end_reason"] == "stop"
    eventually(lambda: not group_alive(int(str(life["pid"]))), timeout=5)
