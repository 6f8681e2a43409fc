"""No open door: ``serve``, ``proxy`` and ``sim`` bound beyond loopback need an incoming API key,
checked on every route but /health; the proxy takes it off and presents the upstream's own; each
prints the address it really bound. Real subprocesses and sockets throughout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from multidict import CIMultiDict

from conftest import ROOT, RunningServer, launch
from wedgewatch.base.errors import BadInput
from wedgewatch.wire import access

KEY = "ww-door-key-5f1e"  # the proxy's (serve's) incoming key
UPSTREAM = "ww-door-upstream-8c2a"  # the server's own --api-key
KEY_VARS = ("WEDGEWATCH_API_KEY", "WEDGEWATCH_UPSTREAM_API_KEY", "VLLM_API_KEY")


@pytest.fixture(autouse=True)
def _no_keys_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KEY_VARS:
        monkeypatch.delenv(name, raising=False)


def _wedgewatch(*args: str) -> list[str]:
    return [sys.executable, "-m", "wedgewatch", *args]


def _start(tmp_path: Path, name: str, *args: str) -> RunningServer:
    return launch(_wedgewatch(*args), tmp_path / f"{name}.log", timeout=60)


def _get(url: str, key: str | None = None, header: str = "authorization") -> int:
    headers = {}
    if key is not None:
        headers[header] = f"Bearer {key}" if header == "authorization" else key
    return httpx.get(url, headers=headers, timeout=30).status_code


def _chat(url: str, key: str) -> httpx.Response:
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    return httpx.post(
        f"{url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}, timeout=60
    )


def _local(url: str) -> str:
    """A URL printed as 0.0.0.0 (every interface), reached over loopback."""
    return url.replace("0.0.0.0", "127.0.0.1")


def _config(tmp_path: Path, key_in: str = "args") -> Path:
    """A sim server wanting UPSTREAM, given as vLLM takes it: ``--api-key`` or ``VLLM_API_KEY``."""
    key = (
        f'args = ["--api-key", "{UPSTREAM}"]'
        if key_in == "args"
        else f'env = {{ VLLM_API_KEY = "{UPSTREAM}" }}'
    )
    cfg = tmp_path / "serve.toml"
    cfg.write_text(
        f"""
[server]
{key}
log_dir = "{tmp_path / "logs"}"
time_scale = 20

[run]
ledger = "{tmp_path / "ledger.sqlite"}"
"""
    )
    return cfg


@pytest.mark.parametrize(
    ("command", "names"),
    [
        (["sim"], "VLLM_API_KEY"),
        (["proxy", "--upstream", "http://127.0.0.1:9"], "WEDGEWATCH_API_KEY"),
        (["serve", "CONFIG"], "WEDGEWATCH_API_KEY"),
    ],
)
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1", "example.org"])
def test_a_bind_beyond_loopback_without_a_key_is_refused_in_one_line(
    tmp_path: Path, command: list[str], names: str, host: str
) -> None:
    argv = [str(_config(tmp_path)) if a == "CONFIG" else a for a in command]
    res = subprocess.run(
        _wedgewatch(*argv, "--host", host, "--port", "0"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert f"--host {host}" in lines[0] and "--api-key" in lines[0] and names in lines[0]
    assert "127.0.0.1" in lines[0], "the line says how to go on"


def test_the_help_names_the_key_and_its_environment_variable() -> None:
    for command, name in (
        ("serve", "WEDGEWATCH_API_KEY"),
        ("proxy", "WEDGEWATCH_API_KEY"),
        ("sim", "VLLM_API_KEY"),
    ):
        out = subprocess.run(
            _wedgewatch(command, "--help"), capture_output=True, text=True, timeout=60, cwd=ROOT
        ).stdout
        assert "--api-key" in out and name in out, f"{command} --help"


def test_sim_with_a_key_guards_every_route_but_health_and_prints_the_real_address(tmp_path: Path) -> None:
    sim = _start(tmp_path, "sim", "sim", "--host", "0.0.0.0", "--port", "0", "--api-key", KEY)
    try:
        assert sim.url.startswith("http://0.0.0.0:"), sim.url  # not 127.0.0.1: what was bound
        url = _local(sim.url)
        assert _get(f"{url}/health") == 200
        for path in ("/v1/models", "/metrics", "/version", "/sim/stats"):
            assert _get(url + path) == 401, path
            assert _get(url + path, "wrong-key") == 401, path
            assert _get(url + path, KEY) == 200, path
            assert _get(url + path, KEY, header="x-api-key") == 200, path
        assert _chat(url, "wrong").status_code == 401
        assert _chat(url, KEY).status_code == 200
    finally:
        sim.stop()


def test_proxy_checks_its_key_and_presents_the_upstreams_in_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = _start(tmp_path, "sim", "sim", "--port", "0", "--api-key", UPSTREAM, "--time-scale", "20")
    monkeypatch.setenv("WEDGEWATCH_API_KEY", KEY)
    monkeypatch.setenv("WEDGEWATCH_UPSTREAM_API_KEY", UPSTREAM)
    proxy = _start(
        tmp_path, "proxy", "proxy", "--upstream", sim.url, "--host", "0.0.0.0", "--port", "0",
        "--records", str(tmp_path / "records.jsonl"),
    )  # fmt: skip
    try:
        assert proxy.url.startswith("http://0.0.0.0:"), proxy.url
        url = _local(proxy.url)
        for path in ("/v1/models", "/wedgewatch/status", "/wedgewatch/metrics", "/metrics"):
            assert _get(url + path) == 401, path
            assert _get(url + path, UPSTREAM) == 401, f"{path}: the server's key is not the proxy's"
            assert _get(url + path, KEY) == 200, path
        assert _get(f"{url}/health") == 200  # passed to the server, which leaves /health open
        # The server wants UPSTREAM, the client sent KEY: the proxy swapped them.
        reply = _chat(url, KEY)
        assert reply.status_code == 200, reply.text
        assert _chat(url, UPSTREAM).status_code == 401
    finally:
        proxy.stop()
        sim.stop()


def test_proxy_takes_its_key_off_when_it_knows_no_upstream_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented choice: the incoming key never reaches the upstream unless it is also given
    as the upstream's (``--upstream-api-key``); a server wanting that very key then refuses."""
    sim = _start(tmp_path, "sim", "sim", "--port", "0", "--api-key", KEY, "--time-scale", "20")
    monkeypatch.setenv("WEDGEWATCH_API_KEY", KEY)
    proxy = _start(
        tmp_path,
        "proxy",
        "proxy",
        "--upstream",
        sim.url,
        "--port",
        "0",
        "--records",
        str(tmp_path / "r.jsonl"),
    )
    try:
        assert _get(f"{proxy.url}/v1/models", KEY) == 401, "the proxy's key went upstream"
    finally:
        proxy.stop()
    proxy = _start(
        tmp_path, "proxy2", "proxy", "--upstream", sim.url, "--port", "0", "--upstream-api-key", KEY,
        "--records", str(tmp_path / "r2.jsonl"),
    )  # fmt: skip
    try:
        assert _get(f"{proxy.url}/v1/models", KEY) == 200, "one key for both, given as both"
    finally:
        proxy.stop()
        sim.stop()


@pytest.mark.parametrize("key_in", ["args", "env"])
def test_serve_with_a_key_guards_its_routes_and_presents_the_servers_own_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key_in: str
) -> None:
    monkeypatch.setenv("WEDGEWATCH_API_KEY", KEY)
    cfg = _config(tmp_path, key_in)
    served = _start(tmp_path, "serve", "serve", str(cfg), "--host", "0.0.0.0", "--port", "0")
    try:
        assert served.url.startswith("http://0.0.0.0:"), served.url
        url = _local(served.url)
        for path in ("/v1/models", "/wedgewatch/servers", "/wedgewatch/status", "/metrics"):
            assert _get(url + path) == 401, path
            assert _get(url + path, KEY) == 200, path
        assert _get(f"{url}/health") == 200
        reply = _chat(url, KEY)  # the supervised sim wants UPSTREAM, from [server] args or env
        assert reply.status_code == 200, reply.text
        # The restart route checks its own token, not the proxy's key: without one it refuses all.
        assert httpx.post(f"{url}/wedgewatch/restart", timeout=30).status_code == 403
    finally:
        served.stop()


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.0.0.1", False),
        ("example.org", False),
    ],
)
def test_loopback_is_127_8_and_ipv6_one_and_localhost(host: str, loopback: bool) -> None:
    assert access.is_loopback(host) is loopback
    if loopback:
        access.require_key(host, None)
    else:
        with pytest.raises(BadInput):
            access.require_key(host, None)
        access.require_key(host, "k")


def test_the_forwarded_headers_carry_the_upstreams_key_on_the_header_the_client_used() -> None:
    given = CIMultiDict({"Authorization": "Bearer in", "x-api-key": "in", "Accept": "x"})
    out = access.forwarded_headers(given, "up")
    assert out["authorization"] == "Bearer up" and out["x-api-key"] == "up" and out["accept"] == "x"
    only = access.forwarded_headers(CIMultiDict({"X-Api-Key": "in"}), "up")
    assert only.get("x-api-key") == "up" and "authorization" not in only
    assert dict(access.forwarded_headers(CIMultiDict({"Authorization": "Bearer in", "A": "1"}), None)) == {
        "A": "1"
    }
    assert access.presented(CIMultiDict({"authorization": "bearer  k "})) == "k"
    assert access.presented(CIMultiDict({"authorization": "Basic k"})) is None
    assert access.matches("k", "k") and not access.matches("k", "kk") and not access.matches(None, "k")
