"""The runner builds its agent before any server starts: a bad agent costs no server life."""

from __future__ import annotations

import sqlite3
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
    with sqlite3.connect(ledger) as db:
        assert db.execute("SELECT COUNT(*) FROM server_lives").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM attempts").fetchone()[0] == 0
