"""The `command` agent end to end: a small external script agent (plain urllib against
$OPENAI_BASE_URL) runs in a real sandbox, talks to the real simulator through the real watchdog
proxy, and edits a file. Exit codes map to statuses; a stall the script swallows is still in the
ledger under the attempt, and the runner's decision makes it api_error; a timeout kills the
script's whole process group."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import RunningServer
from wedgewatch.agents import get_agent
from wedgewatch.agents.command import CommandAgent, fill
from wedgewatch.base.errors import AgentCrash, ConfigError
from wedgewatch.base.protocols import AgentResult, AgentTask
from wedgewatch.base.vocab import is_infra_outcome
from wedgewatch.config import AgentConfig
from wedgewatch.ledger import Ledger
from wedgewatch.runner.retry import decide
from wedgewatch.sandbox import LocalSandbox
from wedgewatch.suites import load_bundled
from wedgewatch.testing import eventually

SECRET = "sk-command-agent-secret-42"

# The external agent: reads its problem file, asks the model once through $OPENAI_BASE_URL, prints
# what came back (or the error, which it swallows), appends a line to a file, exits with argv[1]
# ("hang": starts a grandchild, writes its pid, and sleeps).
AGENT = r"""
import json, os, sys, urllib.error, urllib.request
mode, problem_file, model, target, pid_file = sys.argv[1:6]
problem = open(problem_file).read()
body = {"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": problem}]}
req = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps(body).encode(),
    headers={"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
)
try:
    answer = json.load(urllib.request.urlopen(req, timeout=30))
    print("model said:", answer["choices"][0]["message"]["content"][:40])
except urllib.error.HTTPError as exc:
    print("request failed:", exc.code, exc.read().decode())
except OSError as exc:
    print("request failed:", exc)
with open(target, "a") as f:
    f.write("# touched by the script agent\n")
if mode == "patch-file":
    with open(os.environ["WEDGEWATCH_PATCH_FILE"], "w") as f:
        f.write("diff --git a/x b/x\n--- a/x\n+++ b/x\n")
if mode == "hang":
    import subprocess, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(pid_file, "w") as f:
        f.write(str(child.pid))
    time.sleep(300)
sys.exit(int(mode) if mode.isdigit() else 0)
"""


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    yield Ledger(tmp_path / "ledger.sqlite")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    return path


def first_py(box: LocalSandbox) -> str:
    return sorted(
        p.relative_to(box.path).as_posix() for p in box.path.rglob("*.py") if ".git" not in p.parts
    )[0]


def run(
    script: Path,
    tmp_path: Path,
    base_url: str,
    mode: str,
    attempt_id: str = "att-1",
    problem: str | None = None,
    **cfg: Any,
) -> tuple[AgentResult, str, Path]:
    inst = dict(load_bundled()[0])
    if problem is not None:
        inst["problem_statement"] = problem
    box = LocalSandbox.create(inst, tmp_path / "boxes")
    target = first_py(box)
    pid_file = str(tmp_path / "grandchild.pid")
    argv = [sys.executable, str(script), mode, "{problem_file}", "{model}", target, pid_file]
    agent = CommandAgent(AgentConfig(name="command", command=argv, **cfg))
    traj = tmp_path / "traj" / f"{attempt_id}.json"
    task = AgentTask(attempt_id, inst, box, base_url, "sim-model", api_key=SECRET, trajectory_path=traj)
    try:
        return agent.run(task), target, traj
    finally:
        box.close()


def requests_of(ledger: Ledger, attempt_id: str) -> list[dict[str, Any]]:
    rows = ledger.query("SELECT * FROM requests WHERE attempt_id = ? ORDER BY started_at", (attempt_id,))
    return [dict(r) for r in rows]


def test_placeholders_fill_known_names_only() -> None:
    values = {
        "instance_id": "i-1",
        "attempt_id": "a-1",
        "workdir": "/w",
        "problem_file": "/p.md",
        "patch_file": "/x.diff",
        "base_url": "http://h/a/a-1/v1",
        "model": "m",
    }
    argv = fill(["run", "--in={workdir}", "{problem_file}", '{"k": 1}', "${HOME}", "{unknown}"], values)
    assert argv == ["run", "--in=/w", "/p.md", '{"k": 1}', "${HOME}", "{unknown}"]


def test_registry_builds_it_and_an_empty_command_is_a_config_error() -> None:
    agent = get_agent("command", AgentConfig(command=["true"]))
    assert isinstance(agent, CommandAgent)
    with pytest.raises(ConfigError, match="agent: command"):
        get_agent("command", AgentConfig())


def test_script_agent_through_the_proxy_submits_its_edit(
    start_sim: Callable[..., RunningServer],
    start_proxy: Callable[..., str],
    ledger: Ledger,
    script: Path,
    tmp_path: Path,
) -> None:
    sim = start_sim("--time-scale", "50")
    proxy = start_proxy(sim.url, ledger)
    result, target, traj = run(script, tmp_path, f"{proxy}/a/att-ok/v1", "0", attempt_id="att-ok")

    assert result.status == "submitted" and result.reason == ""
    assert f"diff --git a/{target} b/{target}" in result.patch
    assert "+# touched by the script agent" in result.patch
    assert result.extra["exit_code"] == 0 and result.extra["patch_source"] == "sandbox"
    assert "model said:" in result.extra["output"]
    # The proxy saw the request, under the attempt named by the URL the agent was given.
    rows = requests_of(ledger, "att-ok")
    assert [r["outcome"] for r in rows] == ["ok"] and rows[0]["tokens_out"] > 0
    record = json.loads(traj.read_text())
    assert record["exit_code"] == 0 and record["status"] == "submitted"
    assert "model said:" in traj.with_suffix(".log").read_text()
    for path in (traj, traj.with_suffix(".log")):
        assert SECRET not in path.read_text()


def test_a_swallowed_stall_is_in_the_ledger_and_decides_api_error(
    start_sim: Callable[..., RunningServer],
    start_proxy: Callable[..., str],
    ledger: Ledger,
    script: Path,
    tmp_path: Path,
) -> None:
    sim = start_sim("--scenario", "keywords", "--time-scale", "50")
    # The script asks for one answer, not a stream: only total_timeout watches it (docs/proxy.md).
    proxy = start_proxy(sim.url, ledger, total_timeout=1.0)
    result, _, _ = run(
        script, tmp_path, f"{proxy}/a/att-stall/v1", "0", attempt_id="att-stall", problem="Fix it. STALL-TTFT"
    )

    # The script caught the proxy's 503 and exited 0: on its own word, it submitted.
    assert result.status == "submitted"
    # The proxy's 1 s deadline ended the request (its 503), not the script's own 30 s timeout.
    assert "request failed: 503" in result.extra["output"] and "upstream_stalled" in result.extra["output"]
    rows = requests_of(ledger, "att-stall")
    assert [(r["outcome"], r["http_status"]) for r in rows] == [("total_timeout", 503)]
    # The runner believes the proxy's rows, not the exit code.
    status = decide(result, None, [r["outcome"] for r in rows], is_infra_outcome)
    assert status == ("api_error", "total_timeout")


def test_nonzero_exit_is_early_stop_agent_exit(script: Path, tmp_path: Path) -> None:
    # Nothing listens on port 9: the script's request fails, it says so and exits 3.
    result, target, _ = run(script, tmp_path, "http://127.0.0.1:9/v1", "3", problem="x")
    assert (result.status, result.reason) == ("early_stop", "agent_exit")
    assert result.extra["exit_code"] == 3 and "request failed:" in result.extra["output"]
    assert f"b/{target}" in result.patch  # what it left in the sandbox is still recorded


def test_patch_file_wins_over_the_sandbox_diff(script: Path, tmp_path: Path) -> None:
    result, _, _ = run(script, tmp_path, "http://127.0.0.1:9/v1", "patch-file", problem="x")
    assert result.status == "submitted"
    assert result.patch == "diff --git a/x b/x\n--- a/x\n+++ b/x\n"
    assert result.extra["patch_source"] == "patch_file"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purpose.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1][:1] != "Z"


def test_timeout_kills_the_whole_process_group(script: Path, tmp_path: Path) -> None:
    with pytest.raises(AgentCrash) as info:
        # 6 s: the script must start its grandchild and write the pid before the deadline, which
        # 1.5 s did not promise beside two busy processes on two cores.
        run(script, tmp_path, "http://127.0.0.1:9/v1", "hang", timeout=6.0, problem="x")
    # The 6 s deadline ended it, not the script's 300 s sleep (which would have ended it as "0").
    assert info.value.reason == "agent_timeout"
    # The grandchild the script started shared its process group: it died with it.
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    eventually(lambda: not alive(grandchild), timeout=5, what="the grandchild's death")
    record = json.loads((tmp_path / "traj" / "att-1.json").read_text())
    assert record["timed_out"] is True and record["status"] == "harness_error"
    assert record["reason"] == "agent_timeout"
