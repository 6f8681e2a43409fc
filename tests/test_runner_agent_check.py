"""The runner checks its agent before it writes a row or starts a server: a bad agent costs no
server life and leaves no run behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_unknown_agent_fails_before_a_server_starts(tmp_path: Path) -> None:
    ledger = tmp_path / "l.sqlite"
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f"""
[server]
profile = "sim"
log_dir = "{tmp_path / "logs"}"
[agent]
name = "no-such-agent"
[suite]
slice = "0:1"
[run]
ledger = "{ledger}"
workdir = "{tmp_path / "work"}"
"""
    )
    r = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "run", str(cfg), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "agent.name" in lines[0] and "no-such-agent" in lines[0]
    # Refused with the config's other bad fields, before the run's first row: no ledger, no life.
    assert not ledger.exists()
