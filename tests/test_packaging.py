"""The light core installs and works alone: a wheel built from this tree, installed with its core
dependencies only (pinned by the lock) in a fresh venv, runs the simulator and the proxy; a
command that needs an extra says which one in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UV = Path(sys.executable).parent / "uv"


def _start(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "listening on http://127.0.0.1:PORT"
    assert line.startswith("listening on "), (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, line.split()[-1]


def test_the_core_wheel_alone_runs_the_simulator_and_the_proxy(tmp_path: Path) -> None:
    dist, venv = tmp_path / "dist", tmp_path / "venv"
    subprocess.run([UV, "build", "--wheel", "--out-dir", dist, ROOT], check=True, capture_output=True)
    (wheel,) = dist.glob("wedgewatch-*.whl")
    subprocess.run([UV, "venv", "-q", "--python", sys.executable, venv], check=True)
    py = venv / "bin" / "python"
    subprocess.run(
        [UV, "pip", "install", "-q", "--python", py, wheel, "-c", ROOT / "requirements.lock"],
        check=True,
        capture_output=True,
    )
    # Core only: none of the extras' packages came along.
    for heavy in ("numpy", "scipy", "matplotlib", "minisweagent", "xllamacpp", "datasets", "ray"):
        probe = subprocess.run([py, "-c", f"import {heavy}"], capture_output=True)
        assert probe.returncode != 0, f"{heavy} is installed by the core wheel"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    cli = str(venv / "bin" / "wedgewatch")
    sim, sim_url = _start([cli, "sim", "--port", "0", "--time-scale", "50"], env)
    try:
        proxy, proxy_url = _start([cli, "proxy", "--upstream", sim_url, "--port", "0"], env)
        try:
            body = json.dumps(
                {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
            ).encode()
            req = urllib.request.Request(
                f"{proxy_url}/v1/chat/completions", body, {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=30) as resp:
                answer = json.load(resp)
            assert resp.headers["x-wedgewatch-request-id"]  # it went through the proxy
            assert answer["choices"][0]["message"]["content"]
            assert answer["usage"]["completion_tokens"] >= 1
        finally:
            proxy.terminate()
            proxy.wait(10)
    finally:
        sim.terminate()
        sim.wait(10)
    # A command that needs an extra names it, in one line, exit 2.
    plan = subprocess.run([cli, "plan", "--out", tmp_path / "plan"], capture_output=True, text=True, env=env)
    assert plan.returncode == 2, plan.stderr
    assert plan.stderr.strip().count("\n") == 0
    assert "pip install 'wedgewatch[analysis]'" in plan.stderr
