"""``wedgewatch ledger check`` and the readers' open: each invariant named when a row breaks it,
read-only, and a file that is no wedgewatch ledger refused without a byte written to it."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wedgewatch.base.processes import Identity
from wedgewatch.ledger import Ledger, checks


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", *args], capture_output=True, text=True, timeout=60
    )


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _foreign(tmp_path: Path) -> Path:
    path = tmp_path / "theirs.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    return path


@pytest.mark.parametrize("kind", ["empty file", "foreign SQLite", "text"])
@pytest.mark.parametrize("command", [["report"], ["lives"], ["ledger", "check"]])
def test_a_reader_refuses_what_is_no_ledger_and_writes_nothing(
    tmp_path: Path, kind: str, command: list[str]
) -> None:
    if kind == "empty file":
        path = tmp_path / "empty.sqlite"
        path.write_bytes(b"")
    elif kind == "foreign SQLite":
        path = _foreign(tmp_path)
    else:
        path = tmp_path / "notes.sqlite"
        path.write_text("not a database\n")
    before = _digest(path)
    args = [*command, str(path)] if command == ["ledger", "check"] else [*command, "--ledger", str(path)]
    done = _cli(*args)
    assert done.returncode == 2
    assert (
        done.stderr.count("\n") == 1 and "not a wedgewatch ledger" in done.stderr and str(path) in done.stderr
    )
    assert _digest(path) == before  # not a byte written
    assert not (tmp_path / f"{path.name}-wal").exists()


def _ledger(tmp_path: Path) -> Path:
    path = tmp_path / "l.sqlite"
    with Ledger(path) as lg:
        lg.append(
            "runs",
            {
                "run_id": "r",
                "started_at": time.time(),
                "config_json": {},
                "config_hash": "h",
                "tool_version": "t",
                "attempts_max": 3,
            },
        )
        lg.append("run_marks", {"run_id": "r", "ts": time.time(), "kind": "finished"})
    return path


def test_a_sound_ledger_checks_ok_and_the_check_writes_nothing(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    before = _digest(path)
    done = _cli("ledger", "check", str(path), "--json")
    assert done.returncode == 0, done.stdout
    report = json.loads(done.stdout)
    assert report["ok"] is True and set(report["broken"]) == set(checks.INVARIANTS)
    assert _digest(path) == before


def test_each_broken_invariant_is_named_with_its_row(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    dead = Identity(2**22 + 7, Identity.me().space, "0")  # a pid no process holds, this pid space
    with Ledger(path) as lg:
        now = time.time()
        # A life whose owner is gone and that has no end; an end of an attempt nobody started;
        # two final attempts of one instance; a request started by a dead proxy, never ended.
        lg.append(
            "server_lives",
            {
                "life_id": "L1",
                "run_id": "r",
                "profile": "sim",
                "base_url": "u",
                "start_reason": "run_start",
                "started_at": now,
                **dead.columns("owner_"),
            },
        )
        lg.append("attempt_ends", {"attempt_id": "ghost", "ended_at": now, "status": "submitted"})
        for n in (1, 2):
            lg.append(
                "attempts",
                {
                    "attempt_id": f"a{n}",
                    "run_id": "r",
                    "instance_id": "i",
                    "attempt_no": n,
                    "started_at": now,
                },
            )
            lg.append("attempt_ends", {"attempt_id": f"a{n}", "ended_at": now, "status": "submitted"})
        lg.append(
            "request_starts",
            {
                "request_id": "q1",
                "path": "/v1/chat/completions",
                "client_stream": 0,
                "started_at": now,
                **dead.columns(),
            },
        )
    done = _cli("ledger", "check", str(path))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert "starts have ends: server life L1 has no end" in lines
    assert any(ln.startswith("starts have ends: request q1 started and has no end") for ln in lines)
    assert "ends have starts: attempt_ends row ghost has no attempts row" in lines
    assert (
        "one final outcome per instance: instance i of run r has 2 final (model-side) attempts, not one"
        in lines
    )
    assert "BROKEN" in lines[-1]
