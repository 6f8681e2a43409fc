"""The built-in bash agent end to end: the real simulator (`--policy swe`) plays the model, commands
run in a real sandbox, the patch is checked with the instance's real tests. Each limit ends the
attempt early_stop with its reason; server failures raise the right ApiError."""

from __future__ import annotations

import http.server
import json
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import RunningServer, launch
from wedgewatch.agents import get_agent
from wedgewatch.agents.bash import BashAgent
from wedgewatch.base.errors import (
    BadInput,
    HarnessError,
    UpstreamConnectionError,
    UpstreamHTTPError,
    UpstreamStalled,
)
from wedgewatch.base.protocols import AgentResult, AgentTask
from wedgewatch.config import AgentConfig
from wedgewatch.sandbox import LocalSandbox
from wedgewatch.sim.swe_policy import behaviour
from wedgewatch.suites import load_bundled, node_ids, parse_verdicts, pytest_command
from wedgewatch.suites.testrun import apply_patch_command

FAST = ("--policy", "swe", "--time-scale", "50")
SECRET = "sk-test-secret-key-0123"

StartSim = Callable[..., RunningServer]


def scenario(tmp_path: Path, text: str) -> str:
    path = tmp_path / f"scenario{len(list(tmp_path.glob('scenario*')))}.toml"
    path.write_text(text)
    return str(path)


def pick(how: str, skill: float = 0.0) -> dict[str, Any]:
    return next(i for i in load_bundled() if behaviour(i["instance_id"], 0, skill) == how)


def run_agent(
    url: str, inst: dict[str, Any], tmp_path: Path, cfg: AgentConfig | None = None, model: str = "sim-model"
) -> tuple[AgentResult, dict[str, Any]]:
    box = LocalSandbox.create(inst, tmp_path / "boxes")
    traj_path = tmp_path / "traj" / f"{inst['instance_id']}.json"
    task = AgentTask("att-1", inst, box, url, model, api_key=SECRET, trajectory_path=traj_path)
    try:
        result = BashAgent(cfg or AgentConfig()).run(task)
    finally:
        box.close()
        run_agent.last_trajectory = traj_path  # type: ignore[attr-defined]
    return result, json.loads(traj_path.read_text())


def trajectory() -> dict[str, Any]:
    path: Path = run_agent.last_trajectory  # type: ignore[attr-defined]
    assert SECRET not in path.read_text()
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_registry_builds_the_bash_agent() -> None:
    cfg = AgentConfig(step_limit=7)
    agent = get_agent("bash", cfg)
    assert isinstance(agent, BashAgent) and agent.cfg is cfg
    with pytest.raises(BadInput, match=r"agent\.name"):
        get_agent("no-such-agent", cfg)


def test_solves_a_bundled_instance_end_to_end(start_sim: StartSim, tmp_path: Path) -> None:
    sim = start_sim(*FAST)
    inst = next(i for i in load_bundled() if i["patch"].count("diff --git") > 1)
    result, traj = run_agent(sim.v1, inst, tmp_path)
    assert result.status == "submitted" and result.reason == ""
    assert "diff --git" in result.patch and result.tokens > 0

    # Judge the patch as SWE-bench would: a fresh checkout, the patch, the test patch, the tests.
    box = LocalSandbox.create(inst, tmp_path / "eval")
    try:
        assert box.run(apply_patch_command(result.patch), 30).exit_code == 0
        assert box.run(apply_patch_command(inst["test_patch"]), 30).exit_code == 0
        tests = node_ids(inst["FAIL_TO_PASS"]) + node_ids(inst["PASS_TO_PASS"])
        verdicts = parse_verdicts(box.run(pytest_command(tests), 120).output)
    finally:
        box.close()
    assert {t: verdicts.get(t) for t in tests} == dict.fromkeys(tests, "PASSED")

    assert traj["format"] == "wedgewatch-trajectory-1"
    assert SECRET not in json.dumps(traj)
    assert (traj["status"], traj["steps"], traj["tokens"]["total"]) == (
        "submitted",
        result.steps,
        result.tokens,
    )
    turns = traj["turns"]
    assert all(t["action"] and t["exit_code"] == 0 and not t["format_error"] for t in turns)
    assert turns[-1]["submitted"] and "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in turns[-1]["action"]
    assert any(t["action"].startswith("git apply") for t in turns)
    assert all(t["request_seconds"] > 0 and t["usage"]["completion_tokens"] > 0 for t in turns)
    roles = [m["role"] for m in traj["messages"]]
    assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
    assert roles.count("assistant") == len(turns)


def test_step_limit(start_sim: StartSim, tmp_path: Path) -> None:
    sim = start_sim(*FAST, "--scenario", scenario(tmp_path, "[policy]\nskill = 0.0\n"))
    result, traj = run_agent(sim.v1, pick("wander"), tmp_path, AgentConfig(step_limit=4))
    assert (result.status, result.reason, result.steps, result.patch) == ("early_stop", "step_limit", 4, "")
    assert traj["status"] == "early_stop" and traj["reason"] == "step_limit" and len(traj["turns"]) == 4


def test_format_errors(start_sim: StartSim, tmp_path: Path) -> None:
    sim = start_sim(*FAST, "--scenario", scenario(tmp_path, "[policy]\nskill = 0.0\n"))
    result, traj = run_agent(sim.v1, pick("babble"), tmp_path, AgentConfig(format_error_limit=3))
    assert (result.status, result.reason, result.steps) == ("early_stop", "format_errors", 4)
    assert [t["format_error"] for t in traj["turns"]] == [False, True, True, True]
    corrections = [m for m in traj["messages"] if m["content"].startswith("Format error")]
    assert len(corrections) == 2  # the third bad reply ends the attempt instead


def test_token_limit(start_sim: StartSim, tmp_path: Path) -> None:
    sim = start_sim(*FAST)
    result, traj = run_agent(sim.v1, load_bundled()[0], tmp_path, AgentConfig(token_limit=2000))
    assert (result.status, result.reason) == ("early_stop", "token_limit")
    assert result.tokens >= 2000 and 1 < result.steps < 6
    # The check runs before each request, so the limit was crossed by the last reply, not earlier.
    last = traj["turns"][-1]["usage"]
    assert result.tokens - last["prompt_tokens"] - last["completion_tokens"] < 2000


def test_context_window(start_sim: StartSim, tmp_path: Path) -> None:
    sim = start_sim(*FAST, "--max-model-len", "2000")
    result, traj = run_agent(sim.v1, load_bundled()[0], tmp_path, AgentConfig(max_tokens=500))
    assert (result.status, result.reason) == ("early_stop", "context_window")
    assert 1 < result.steps < 8
    assert traj["turns"][-1]["usage"]["prompt_tokens"] + 500 <= 2000


def test_first_request_over_the_context_is_not_the_models_fault(start_sim: StartSim, tmp_path: Path) -> None:
    sim = start_sim(*FAST, "--max-model-len", "2000")
    with pytest.raises(HarnessError) as info:
        run_agent(sim.v1, load_bundled()[0], tmp_path, AgentConfig(max_tokens=4096))
    assert info.value.reason == "context_window_first_request"
    assert trajectory()["status"] == "harness_error"


def test_server_error_mid_trajectory(start_sim: StartSim, tmp_path: Path) -> None:
    faults = '[[fault]]\nwhen = { nth = 3 }\naction = "http_error"\nstatus = 503\n'
    sim = start_sim(*FAST, "--scenario", scenario(tmp_path, faults))
    with pytest.raises(UpstreamHTTPError) as info:
        run_agent(sim.v1, load_bundled()[0], tmp_path)
    assert info.value.reason == "upstream_http_503"
    traj = trajectory()
    assert (traj["status"], traj["reason"], traj["steps"]) == ("api_error", "upstream_http_503", 2)
    assert traj["error"]["type"] == "UpstreamHTTPError"


def test_stall_mid_trajectory_through_the_proxy(start_sim: StartSim, tmp_path: Path) -> None:
    faults = '[[fault]]\nwhen = { nth = 3 }\naction = "stall_after"\nafter_tokens = 2\n'
    sim = start_sim(*FAST, "--scenario", scenario(tmp_path, faults))
    argv = [sys.executable, "-m", "wedgewatch", "proxy", "--upstream", sim.url, "--port", "0"]
    # The agent asks for one answer, not a stream: only total_timeout watches it (docs/proxy.md).
    argv += ["--total-timeout", "1", "--records", str(tmp_path / "requests.jsonl")]
    proxy = launch(argv, tmp_path / "proxy.log")
    try:
        with pytest.raises(UpstreamStalled) as info:
            run_agent(proxy.url + "/a/att-1/v1", load_bundled()[0], tmp_path)
    finally:
        proxy.stop()
    assert info.value.reason == "total_timeout"  # the proxy's 1 s deadline ended it
    rows = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [r["outcome"] for r in rows] == ["ok", "ok", "total_timeout"]  # and no retry
    assert trajectory()["steps"] == 2


def test_unknown_model_is_our_fault(start_sim: StartSim, tmp_path: Path) -> None:
    sim = start_sim(*FAST)
    with pytest.raises(HarnessError) as info:
        run_agent(sim.v1, load_bundled()[0], tmp_path, model="not-served")
    assert info.value.reason == "http_404"


def test_connection_refused(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UpstreamConnectionError):
        run_agent(f"http://127.0.0.1:{port}/v1", load_bundled()[0], tmp_path)
    assert trajectory()["status"] == "api_error"


def test_a_server_whose_certificate_is_not_trusted_is_refused(tmp_path: Path) -> None:
    # The agent's client shares one TLS context across attempts; it must still verify: an HTTPS
    # server with a self-signed certificate is a connection error, never a conversation.
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    answered: list[str] = []

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            answered.append(self.path)
            body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "hi"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/v1"
        with pytest.raises(UpstreamConnectionError) as refused:
            run_agent(url, load_bundled()[0], tmp_path)
    finally:
        server.shutdown()
        server.server_close()
    causes, exc = [], refused.value.__cause__
    while exc is not None:
        causes.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    assert any("CERTIFICATE_VERIFY_FAILED" in c for c in causes), causes
    assert answered == [] and trajectory()["status"] == "api_error"
