"""The `mini-swe-agent` agent with the real package: mini's DefaultAgent and LitellmModel (tool
calls) talk to the real simulator (`--policy swe` plays the model) through the real watchdog proxy,
and mini's commands run in a real sandbox. The patch is judged with the instance's own tests."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import RunningServer
from wedgewatch.agents import get_agent
from wedgewatch.agents.miniswe import MiniSweAgent
from wedgewatch.base.errors import ConfigError, UpstreamHTTPError, UpstreamStalled
from wedgewatch.base.protocols import AgentResult, AgentTask
from wedgewatch.config import AgentConfig
from wedgewatch.ledger import Ledger
from wedgewatch.sandbox import LocalSandbox
from wedgewatch.sim.swe_policy import behaviour
from wedgewatch.suites import evaluate, load_bundled

# One worker runs this module: the agent imports litellm (about 1.6 CPU-s) in the process that runs
# it, once per worker that gets one of these tests (9 s in all, alone).
pytestmark = pytest.mark.xdist_group("litellm")

FAST = ("--policy", "swe", "--time-scale", "50")
SECRET = "sk-mini-secret-0042"
StartSim = Callable[..., RunningServer]


def pick(how: str = "solve") -> dict[str, Any]:
    return next(
        i for i in load_bundled() if behaviour(i["instance_id"], 0, 1.0 if how == "solve" else 0.0) == how
    )


def run_mini(
    base_url: str,
    tmp_path: Path,
    attempt_id: str,
    cfg: AgentConfig | None = None,
    inst: dict[str, Any] | None = None,
) -> tuple[AgentResult, dict[str, Any]]:
    inst = inst or pick()
    box = LocalSandbox.create(inst, tmp_path / "boxes")
    traj = tmp_path / "traj" / f"{attempt_id}.traj.json"
    task = AgentTask(attempt_id, inst, box, base_url, "sim-model", api_key=SECRET, trajectory_path=traj)
    try:
        result = MiniSweAgent(cfg or AgentConfig(name="mini-swe-agent")).run(task)
    finally:
        box.close()
        run_mini.trajectory = traj  # type: ignore[attr-defined]
    return result, load_trajectory(traj)


def load_trajectory(path: Path) -> dict[str, Any]:
    text = path.read_text()
    assert SECRET not in text
    return json.loads(text)  # type: ignore[no-any-return]


def outcomes(ledger: Ledger, attempt_id: str) -> list[str]:
    rows = ledger.query(
        "SELECT outcome FROM requests WHERE attempt_id = ? ORDER BY started_at", (attempt_id,)
    )
    return [r["outcome"] for r in rows]


def test_registry_builds_it_and_a_bad_config_names_the_field() -> None:
    assert isinstance(get_agent("mini-swe-agent", AgentConfig()), MiniSweAgent)
    with pytest.raises(ConfigError, match="miniswe_config"):
        MiniSweAgent(AgentConfig(miniswe_config="/no/such/mini-config.yaml"))


def test_solves_a_bundled_instance_through_the_proxy(
    start_sim: StartSim, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    sim = start_sim(*FAST)
    proxy = start_proxy(sim.url, ledger)
    inst = pick("solve")
    result, traj = run_mini(f"{proxy}/a/att-solve/v1", tmp_path, "att-solve", inst=inst)

    assert (result.status, result.reason) == ("submitted", "")
    assert result.extra["exit_status"] == "Submitted" and result.extra["patch_source"] == "sandbox"
    assert result.steps >= 3 and result.tokens > 0
    # Every model call went through the proxy under this attempt, one request each (no retries).
    assert outcomes(ledger, "att-solve") == ["ok"] * result.steps
    # mini spoke its tool-call dialect: the simulator answered with bash tool calls.
    assistant = [m for m in traj["messages"] if m["role"] == "assistant"]
    assert assistant and all(m.get("tool_calls") for m in assistant)
    assert traj["info"]["exit_status"] == "Submitted"
    assert traj["info"]["wedgewatch"] == {"status": "submitted", "reason": ""}
    assert "api_key" not in traj["info"]["config"]["model"]["model_kwargs"]

    # The patch resolves the instance with its own tests, in a fresh checkout.
    box = LocalSandbox.create(inst, tmp_path / "eval")
    try:
        verdict = evaluate(box, inst, result.patch, timeout=120)
    finally:
        box.close()
    assert verdict.patch_applied and verdict.resolved, verdict.log[-2000:]


def test_step_limit_is_early_stop(start_sim: StartSim, tmp_path: Path) -> None:
    sim = start_sim(*FAST)
    result, traj = run_mini(sim.v1, tmp_path, "att-steps", AgentConfig(step_limit=2))
    assert (result.status, result.reason) == ("early_stop", "step_limit")
    assert result.steps == 2 and result.extra["exit_status"] == "LimitsExceeded"
    assert traj["info"]["wedgewatch"] == {"status": "early_stop", "reason": "step_limit"}


def test_token_limit_is_early_stop(start_sim: StartSim, tmp_path: Path) -> None:
    sim = start_sim(*FAST)
    result, _ = run_mini(sim.v1, tmp_path, "att-tokens", AgentConfig(token_limit=1))
    # The first reply already spends more than one token; the agent stops before the second call.
    assert (result.status, result.reason, result.steps) == ("early_stop", "token_limit", 1)


def test_a_midtrajectory_stall_is_upstream_stalled_after_one_request(
    start_sim: StartSim, start_proxy: Callable[..., str], tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    scenario = tmp_path / "stall3.toml"
    scenario.write_text('[[fault]]\nwhen.nth = 3\naction = "stall_ttft"\n')
    sim = start_sim(*FAST, "--scenario", str(scenario))
    # mini asks for one answer, not a stream: only total_timeout watches it (docs/proxy.md).
    proxy = start_proxy(sim.url, ledger, total_timeout=1.0)
    with pytest.raises(UpstreamStalled) as info:
        run_mini(f"{proxy}/a/att-stall/v1", tmp_path, "att-stall")
    assert info.value.reason == "total_timeout" and info.value.status == "api_error"
    # Two good turns, then the stall; mini's own retry loop did not send the request again.
    assert outcomes(ledger, "att-stall") == ["ok", "ok", "total_timeout"]
    traj = load_trajectory(run_mini.trajectory)  # type: ignore[attr-defined]
    assert traj["info"]["wedgewatch"] == {"status": "api_error", "reason": "total_timeout"}


def test_a_server_error_is_upstream_http_error_without_retries(start_sim: StartSim, tmp_path: Path) -> None:
    scenario = tmp_path / "http500.toml"
    scenario.write_text('[[fault]]\nwhen.nth = 1\naction = "http_error"\nstatus = 500\n')
    sim = start_sim(*FAST, "--scenario", str(scenario))
    with pytest.raises(UpstreamHTTPError) as info:
        run_mini(sim.v1, tmp_path, "att-500")
    assert info.value.reason == "upstream_http_500"
    # The OpenAI client under litellm would have retried a 500 twice; max_retries=0 stops it.
    with urllib.request.urlopen(sim.url + "/sim/stats", timeout=10) as answer:
        stats = json.load(answer)
    assert stats["received"] == 1 and stats["http_errors"] == 1, stats


def test_the_servers_context_limit_is_early_stop_context_window(start_sim: StartSim, tmp_path: Path) -> None:
    # prompt + max_tokens over --max-model-len gets vLLM's 400, which litellm calls a context
    # window error: the model's own limit, not the infrastructure's.
    sim = start_sim(*FAST, "--max-model-len", "4096")
    result, traj = run_mini(sim.v1, tmp_path, "att-ctx", AgentConfig(max_tokens=4000))
    assert (result.status, result.reason) == ("early_stop", "context_window")
    assert result.extra["exit_status"] == "ContextWindowExceededError"
    assert traj["info"]["wedgewatch"] == {"status": "early_stop", "reason": "context_window"}


def test_the_wall_clock_limit_is_early_stop_time_limit(start_sim: StartSim, tmp_path: Path) -> None:
    # A model that wanders (never submits) on a healthy server: mini checks its wall-clock limit
    # (agent.timeout) between steps and stops there; every request was answered.
    scenario = tmp_path / "unskilled.toml"
    scenario.write_text("[policy]\nskill = 0.0\n")
    sim = start_sim("--policy", "swe", "--time-scale", "10", "--scenario", str(scenario))
    cfg = AgentConfig(timeout=3.0, step_limit=500)
    result, _ = run_mini(sim.v1, tmp_path, "att-time", cfg, inst=pick("wander"))
    assert (result.status, result.reason) == ("early_stop", "time_limit")
    # How many steps fit in 3 s is the machine's speed: at least the one after which the limit was seen.
    assert result.extra["exit_status"] == "TimeExceeded" and result.steps >= 1
