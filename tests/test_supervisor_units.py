"""The supervisor's pure parts: wedge rule, restart policy, profiles, process helpers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wedgewatch.base import redact
from wedgewatch.base.errors import ConfigError, ServerStartError, WarmupError
from wedgewatch.config import ServerConfig
from wedgewatch.supervisor import profiles
from wedgewatch.supervisor.detector import Reading, WedgeDetector
from wedgewatch.supervisor.life import api_key
from wedgewatch.supervisor.policy import BACKOFF_CAP, RestartPolicy
from wedgewatch.supervisor.process import LocalServer, bind_failed, group_alive, port_busy
from wedgewatch.testing import eventually

# --- the wedge rule ---------------------------------------------------------------------------


def _r(at: float, tokens: float | None, running: float | None, waiting: float = 0) -> Reading:
    return Reading(at=at, wall=1000 + at, tokens=tokens, generated=tokens, running=running, waiting=waiting)


def test_wedge_fires_after_window_of_flat_counters_with_work_running() -> None:
    d = WedgeDetector(window=2.0)
    fired_at = None
    # tokens move until t=1.0, then stay flat while one request runs; scrapes every 0.5 s
    for i in range(20):
        t = i * 0.5
        tokens = min(t, 1.0) * 100
        ev = d.observe(_r(t, tokens, 1))
        if ev is not None:
            fired_at = t
            break
    assert fired_at is not None
    # last movement seen at t=1.0; window 2 s; one scrape interval of discretisation at most
    assert 3.0 <= fired_at <= 1.0 + 2.0 + 2 * 0.5
    assert ev is not None and ev["source"] == "metrics" and ev["running"] == 1
    assert ev["flat_seconds"] >= 2.0 and ev["samples"], "evidence carries the readings"


def test_idle_server_with_flat_counters_is_not_a_wedge() -> None:
    d = WedgeDetector(window=1.0)
    assert all(d.observe(_r(t * 0.5, 500, 0)) is None for t in range(40))


def test_progress_resets_the_window_and_it_fires_once() -> None:
    d = WedgeDetector(window=1.0)
    events = []
    for i in range(40):
        t = i * 0.25
        # a slow but moving server: one token every 0.75 s
        events.append(d.observe(_r(t, float(int(t / 0.75)), 2)))
    assert not any(events)
    d2 = WedgeDetector(window=1.0)
    fired = [d2.observe(_r(i * 0.25, 7, 1)) for i in range(40)]
    assert sum(e is not None for e in fired) == 1
    assert d2.fired


def test_missing_series_cannot_judge() -> None:
    d = WedgeDetector(window=0.5)
    assert all(d.observe(_r(i * 0.5, None, 3)) is None for i in range(10))
    assert all(d.observe(_r(i * 0.5, 9, None)) is None for i in range(10, 20))


def test_running_starting_after_a_long_idle_starts_a_fresh_window() -> None:
    d = WedgeDetector(window=2.0)
    for i in range(20):  # idle and flat for 10 s
        assert d.observe(_r(i * 0.5, 40, 0)) is None
    # a request starts at t=10 and the counters stay flat: not a wedge before t=12
    assert d.observe(_r(10.0, 40, 1)) is None
    assert d.observe(_r(11.5, 40, 1)) is None
    assert d.observe(_r(12.0, 40, 1)) is not None


# --- restart policy --------------------------------------------------------------------------


def test_consecutive_api_errors_restart_and_a_success_resets() -> None:
    p = RestartPolicy(ServerConfig(restart_after_api_errors=2))
    assert p.attempt(True) is None
    assert p.attempt(False) is None
    assert p.attempt(True) is None
    assert p.attempt(True) == "api_errors"
    assert p.attempt(True) is None, "the count starts over after a restart"
    p.life_ready()
    assert p.attempt(True) is None
    off = RestartPolicy(ServerConfig(restart_after_api_errors=0))
    assert all(off.attempt(True) is None for _ in range(10))


def test_recycling_is_off_by_default_and_counts_when_on() -> None:
    p = RestartPolicy(ServerConfig())
    assert all(p.instance_done() is None for _ in range(50))
    assert p.tokens(10**9) is None
    q = RestartPolicy(ServerConfig(recycle_every_instances=3, recycle_every_tokens=1000))
    assert [q.instance_done() for _ in range(6)] == [None, None, "recycle_instances"] * 2
    assert q.tokens(999) is None and q.tokens(1000) == "recycle_tokens"


def test_restart_budget_and_backoff() -> None:
    p = RestartPolicy(ServerConfig(max_restarts=2, restart_backoff=2.0))
    p.count(ServerStartError("x"), "start_failed")
    p.count(ServerStartError("x"), "start_failed")
    with pytest.raises(WarmupError, match="gave up after 2 restarts"):
        p.count(WarmupError("warm-up request 1 of 2 failed"), "warmup_failed")
    assert [p.backoff(n) for n in range(5)] == [0.0, 2.0, 4.0, 8.0, 16.0]
    assert p.backoff(30) == BACKOFF_CAP


# --- profiles --------------------------------------------------------------------------------


def test_vllm_argv_with_hybrid_safe_and_lora() -> None:
    cfg = ServerConfig(
        profile="vllm",
        model="Qwen/Qwen3.6-35B-A3B",
        served_model_name="qwen",
        arg_sets=["hybrid-safe"],
        lora_modules={"fix": "/loras/fix"},
        args=["--max-num-seqs", "4"],
    )
    p = profiles.check(cfg)
    argv = profiles.launch_argv(cfg, p, "127.0.0.1", 8000)
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3.6-35B-A3B"]
    for flag in ("--no-enable-prefix-caching", "--enforce-eager", "--enable-lora", "fix=/loras/fix"):
        assert flag in argv
    assert argv[argv.index("--port") + 1] == "8000"
    assert argv[argv.index("--served-model-name") + 1] == "qwen"
    assert profiles.concurrency_limit(argv, p) == 4
    s = profiles.series(cfg, p)
    assert s.token_counters[0] == "vllm:generation_tokens_total"
    assert s.running_gauge == "vllm:num_requests_running"


def test_sim_takes_the_vllm_flags_unchanged() -> None:
    cfg = ServerConfig(profile="sim", arg_sets=["hybrid-safe"], scenario="healthy", time_scale=50)
    p = profiles.check(cfg)
    argv = profiles.launch_argv(cfg, p, "127.0.0.1", 9)
    assert argv[:4] == [sys.executable, "-m", "wedgewatch", "sim"]
    assert argv[-2:] == list(profiles.HYBRID_SAFE_VLLM)
    assert argv[argv.index("--time-scale") + 1] == "50.0"


def test_sglang_and_llamacpp_profiles() -> None:
    sg = ServerConfig(
        profile="sglang", model="m", arg_sets=["hybrid-safe"], args=["--max-running-requests", "4"]
    )
    p = profiles.check(sg)
    argv = profiles.launch_argv(sg, p, "127.0.0.1", 30000)
    assert argv[1:3] == ["-m", "sglang.launch_server"] and "--enable-metrics" in argv
    assert "--disable-radix-cache" in argv and "--disable-cuda-graph" in argv
    assert p.canary_path == "/health_generate" and profiles.concurrency_limit(argv, p) == 4

    ll = ServerConfig(profile="llamacpp", model="/m/x.gguf", args=["-np", "2"])
    p = profiles.check(ll)
    argv = profiles.launch_argv(ll, p, "127.0.0.1", 1)
    assert argv[:3] == ["llama-server", "-m", "/m/x.gguf"] and "--metrics" in argv
    assert profiles.concurrency_limit(argv, p) == 2
    assert profiles.series(ll, p).running_gauge == "llamacpp:requests_processing"

    xl = ServerConfig(profile="llamacpp", launcher="xllamacpp", model=profiles.BUNDLED_MODEL)
    argv = profiles.launch_argv(xl, profiles.check(xl), "127.0.0.1", 1)
    assert argv[:3] == [sys.executable, "-m", profiles.XLLAMACPP_MODULE]
    assert "--model" not in argv, "the launcher's own bundled model"
    assert argv[argv.index("--alias") + 1] == profiles.BUNDLED_MODEL


def test_command_profile_fills_placeholders() -> None:
    cfg = ServerConfig(
        profile="command",
        command=["myserver", "--bind={host}:{port}", "{model}"],
        model="m1",
        token_counters=["x_tokens_total"],
        running_gauge="x_running",
    )
    p = profiles.check(cfg)
    assert profiles.launch_argv(cfg, p, "127.0.0.1", 77) == ["myserver", "--bind=127.0.0.1:77", "m1"]
    assert profiles.series(cfg, p).names() == ["x_tokens_total", "x_running"]


@pytest.mark.parametrize(
    ("fields", "bad_field"),
    [
        ({"profile": "tgi"}, "server.profile"),
        ({"profile": "vllm", "arg_sets": ["turbo"]}, "server.arg_sets"),
        ({"profile": "command"}, "server.command"),
        ({"profile": "command", "command": ["x", "{nope}"]}, "server.command"),
        ({"profile": "external"}, "server.url"),
        ({"profile": "vllm", "launcher": "xllamacpp"}, "server.launcher"),
    ],
)
def test_profile_checks_name_the_field(fields: dict[str, object], bad_field: str) -> None:
    with pytest.raises(ConfigError) as err:
        profiles.check(ServerConfig.model_validate(fields), "cfg.toml")
    assert err.value.field == bad_field
    assert str(err.value).startswith(f"cfg.toml: {bad_field}: ")


def test_api_keys_never_recorded() -> None:
    argv = ["vllm", "serve", "m", "--api-key", "sk-secret", "--hf-token=hf_secret", "--api-key-file", "/k"]
    shown = redact.argv(argv)
    assert "sk-secret" not in " ".join(shown) and "hf_secret" not in " ".join(shown)
    assert "/k" in shown, "a key file's path is not a secret"
    assert api_key(argv) == "sk-secret"
    log = "non-default args: {'model': 'm', 'api_key': 'sk-secret'}\nAuthorization: Bearer sk-secret\n"
    assert "sk-secret" not in redact.text(log)
    assert (
        redact.text("vllm:prompt_tokens_total 12, max_tokens=40")
        == "vllm:prompt_tokens_total 12, max_tokens=40"
    )


# --- processes --------------------------------------------------------------------------------


def test_port_busy_sees_a_listener_but_not_a_free_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert port_busy("127.0.0.1", port)
    assert not port_busy("127.0.0.1", port)


def test_bind_failure_is_recognised_in_logs() -> None:
    assert bind_failed(
        "OSError: [Errno 98] error while attempting to bind on address: address already in use"
    )
    assert bind_failed("main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080")
    assert not bind_failed("INFO: model loaded in 3.2 s")


def test_stop_kills_a_group_that_ignores_sigterm_children_included(tmp_path: Path) -> None:
    # A parent and a child that both ignore SIGTERM: only SIGKILL of the group ends them.
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal,time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = LocalServer([sys.executable, "-c", script], "http://127.0.0.1:1", tmp_path / "x.log")
    proc.start()
    assert proc.pid is not None
    eventually(lambda: "up" in (tmp_path / "x.log").read_text(), what="the script up")
    assert os.getpgid(proc.pid) == proc.pid, "its own process group"
    children = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert len(children) == 2
    t0 = time.monotonic()
    code = proc.stop(grace=0.5)
    # The grace is real time (stop's own wait): a lower bound, which a busy machine cannot break.
    assert time.monotonic() - t0 >= 0.5
    assert code == -signal.SIGKILL
    assert not group_alive(proc.pid)


@pytest.mark.parametrize("restart_on_wedge", [True, False])
def test_a_new_request_is_not_sent_to_a_wedged_life_whose_replacement_comes(restart_on_wedge: bool) -> None:
    """Between the wedge verdict and the restart, the pool offers no life when the wedged one will
    be replaced (a new request waits for the next, the proxy's restart_wait), and keeps offering it
    when it will not (``restart_on_wedge`` off: the proxy's deadlines deal with its requests)."""
    from wedgewatch.supervisor import Supervisor
    from wedgewatch.supervisor.life import Life
    from wedgewatch.supervisor.pool import Pool
    from wedgewatch.supervisor.process import AdoptedServer

    sup = Supervisor(ServerConfig(profile="sim", restart_on_wedge=restart_on_wedge))
    life = Life(
        "life-w", AdoptedServer("http://127.0.0.1:1", None), [], "t", 0.0, WedgeDetector(8.0), ready=True
    )
    sup._life = life  # the state the supervisor's own wedge handler leaves it in, set here directly
    pool = Pool([sup])
    assert pool.life() is not None and pool.life_id == "life-w"  # a ready life, before the verdict
    life.wedged = True
    assert (pool.life() is None) == restart_on_wedge
