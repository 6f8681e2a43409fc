"""Fail early: a directory ``run``, ``serve`` or ``wrap`` cannot write is one line naming its
field (exit 2) before any server starts; a server that fails to start the same way
``max_same_start_failures`` times in a row stops the command (exit 1) with its log's tail, not
after minutes of backoff. Bad inputs elsewhere: one line, exit 2. Real subprocesses throughout."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from wedgewatch.base.errors import BadInput, ServerStartError, WarmupError
from wedgewatch.base.files import check_writable
from wedgewatch.config import ServerConfig
from wedgewatch.ledger import Ledger
from wedgewatch.suites.bundled import load_bundled
from wedgewatch.supervisor.policy import RestartPolicy, failure_signature

UNWRITABLE = "/proc/self/wedgewatch-test"
"""A directory nobody can create, root included (this machine's tests run as root, for whom every
mode bit says yes)."""

EXITS = "[startup]\nexit_code = 3\n"


def wedgewatch(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", *args], capture_output=True, text=True, timeout=180, cwd=cwd
    )


def config(tmp_path: Path, server: str = "", run: str = "") -> Path:
    cfg = tmp_path / "c.toml"
    first = load_bundled()[0]["instance_id"]
    cfg.write_text(
        f"""
[server]
log_dir = "{tmp_path / "logs"}"
time_scale = 20
restart_backoff = 0.05
{server}
[suite]
ids = ["{first}"]
[run]
{run}
"""
    )
    for key, value in (("ledger", tmp_path / "l.sqlite"), ("workdir", tmp_path / "work")):
        if f"{key} =" not in run:
            cfg.write_text(cfg.read_text() + f'{key} = "{value}"\n')
    return cfg


def one_line(res: subprocess.CompletedProcess[str], code: int) -> str:
    assert res.returncode == code, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("command", "server", "run", "extra", "field"),
    [
        ("run", "", f'workdir = "{UNWRITABLE}/work"', [], "run.workdir"),
        ("run", f'log_dir = "{UNWRITABLE}/logs"', "", [], "server.log_dir"),
        ("run", "", f'ledger = "{UNWRITABLE}/l.sqlite"', [], "run.ledger"),
        ("serve", f'log_dir = "{UNWRITABLE}/logs"', "", ["--port", "0"], "server.log_dir"),
        ("serve", "", "", ["--port", "0", "--ledger", f"{UNWRITABLE}/l.sqlite"], "--ledger"),
        ("wrap", f'log_dir = "{UNWRITABLE}/logs"', "", ["--", "true"], "server.log_dir"),
        ("wrap", "", f'ledger = "{UNWRITABLE}/l.sqlite"', ["--", "true"], "run.ledger"),
    ],
)
def test_a_directory_that_cannot_be_written_is_one_line_before_any_server(
    tmp_path: Path, command: str, server: str, run: str, extra: list[str], field: str
) -> None:
    # `log_dir` appears twice in a server section if set again: take the test's value alone.
    cfg = config(tmp_path, run=run).read_text()
    if server:
        cfg = cfg.replace(f'log_dir = "{tmp_path / "logs"}"', server)
    (tmp_path / "c.toml").write_text(cfg)
    res = wedgewatch(tmp_path, command, str(tmp_path / "c.toml"), *extra)
    line = one_line(res, 2)
    assert line.startswith(f"wedgewatch: error: {field}: {UNWRITABLE}"), line
    assert "listening" not in res.stdout
    assert not (tmp_path / "logs").exists(), "no server was started"
    assert not (tmp_path / "l.sqlite").exists(), "no row was written"


def test_a_file_in_the_way_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match=r"^run.workdir: .*file/work: .*file is not a directory$"):
        check_writable(tmp_path / "file" / "work", "run.workdir")
    check_writable(tmp_path / "new" / "deeper", "run.workdir")  # creatable: fine
    assert not (tmp_path / "new").exists(), "checking creates nothing"


@pytest.mark.parametrize("command", ["serve", "run", "wrap"])
def test_a_server_that_fails_to_start_the_same_way_three_times_stops_the_command(
    tmp_path: Path, command: str
) -> None:
    (tmp_path / "exits.toml").write_text(EXITS)
    cfg = config(tmp_path, server=f'scenario = "{tmp_path / "exits.toml"}"')
    extra = {"serve": ["--port", "0"], "run": ["--run-id", "r"], "wrap": ["--", "true"]}[command]
    res = wedgewatch(tmp_path, command, str(cfg), *extra)
    assert res.returncode == 1, res.stderr
    assert "failed to start the same way 3 times in a row (server.max_same_start_failures)" in res.stderr
    assert "exited with code 3 during start-up" in res.stderr
    assert "exits with code 3 before listening" in res.stderr, "the log's tail is shown"
    with Ledger(tmp_path / "l.sqlite") as lg:
        lives = lg.query("SELECT life_id FROM server_lives")
    assert len(lives) == 3, "three starts, then no more (max_restarts is 10)"


def test_the_same_failure_is_the_same_whatever_the_life() -> None:
    a = ServerStartError("server exited with code 1 during start-up; last lines of logs/life-0a1b.log:\nx")
    b = ServerStartError("server exited with code 1 during start-up; last lines of logs/life-9f8e.log:\ny")
    c = ServerStartError("server exited with code 2 during start-up; last lines of logs/life-9f8e.log:\ny")
    assert failure_signature(a) == failure_signature(b) != failure_signature(c)
    assert failure_signature(WarmupError("server exited with code 1 during start-up")) != failure_signature(a)
    policy = RestartPolicy(ServerConfig(max_same_start_failures=3))
    policy.start_failed(a)
    policy.start_failed(c)  # another way: the count starts again
    policy.start_failed(a)
    policy.start_failed(b)
    with pytest.raises(ServerStartError, match="the same way 3 times in a row"):
        policy.start_failed(a)
    policy = RestartPolicy(ServerConfig(max_same_start_failures=2))
    policy.start_failed(a)
    policy.life_ready()  # a ready life in between: not in a row
    policy.start_failed(a)
    with pytest.raises(ServerStartError):
        policy.start_failed(b)


# --- bad input: one line, exit 2 -----------------------------------------------------------------


def test_sim_refuses_a_port_out_of_range(tmp_path: Path) -> None:
    for port in ("99999", "-1", "65536"):
        line = one_line(wedgewatch(tmp_path, "sim", "--port", port), 2)
        assert "--port" in line


@pytest.mark.parametrize(
    ("command", "server", "extra"),
    [
        ("serve", "", ["--port", "{port}"]),
        ("wrap", "", ["--port", "{port}", "--", "true"]),
        ("proxy", None, ["--upstream", "http://127.0.0.1:9", "--port", "{port}"]),
        ("sim", None, ["--port", "{port}"]),
        ("serve", "port = {port}", ["--port", "0"]),  # the config's server port, not a flag
    ],
)
def test_a_busy_port_is_one_line_for_every_command_that_binds(
    tmp_path: Path, command: str, server: str | None, extra: list[str]
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1])
        args = [a.replace("{port}", port) for a in extra]
        if server is not None:
            cfg = config(tmp_path, server=server.replace("{port}", port))
            args = [str(cfg), *args]
        res = wedgewatch(tmp_path, command, *args)
    line = one_line(res, 2)
    assert f"{port} is already in use" in line or f"{port} on 127.0.0.1 is already in use" in line, line
    assert ("server.port" if server else "--port") in line, line
    assert "listening" not in res.stdout


@pytest.mark.parametrize(
    "content", [b"", b"not a database, just text\n", b"SQLite format 3\x00" + b"\x00" * 80]
)
def test_a_ledger_that_is_not_a_sqlite_file_is_one_line(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(content)
    results = tmp_path / "results.jsonl"
    results.write_text('{"instance_id": "a", "resolved": true}\n{"instance_id": "b", "resolved": false}\n')
    cfg = config(tmp_path, run=f'ledger = "{bad}"')
    commands = [["report", "r", "--ledger", str(bad)], ["audit", str(results), "--ledger", str(bad)]]
    if content:  # an empty file is a new SQLite database to a writer: `run` may start one there
        commands.append(["run", str(cfg)])
    for args in commands:
        line = one_line(wedgewatch(tmp_path, *args), 2)
        assert str(bad) in line, (args, line)
    assert bad.read_bytes() == content, "a reader left the file as it was"


def test_json_nested_100000_deep_is_one_line_for_scan_and_audit(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    line = one_line(wedgewatch(tmp_path, "scan", str(deep)), 2)
    assert "deep.json" in line and "nested too deeply" in line
    with Ledger(tmp_path / "l.sqlite"):
        pass  # an empty ledger: audit reads the results before it looks for requests
    line = one_line(wedgewatch(tmp_path, "audit", str(deep), "--ledger", str(tmp_path / "l.sqlite")), 2)
    assert "deep.json" in line


def test_nan_and_infinite_durations_are_no_durations(tmp_path: Path) -> None:
    rows = [
        {"instance_id": "a", "duration": float("nan"), "status": "Request timed out."},
        {"instance_id": "b", "duration": float("inf"), "status": "Request timed out."},
        {"instance_id": "c", "duration": "-inf", "status": "ok"},
        {"instance_id": "d", "duration": 1801.9, "status": "Request timed out."},
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    res = wedgewatch(tmp_path, "scan", str(path))
    assert res.returncode == 0, res.stderr
    assert re.search(r"(?<![\w.])-?(nan|inf)(?!\w)", res.stdout, re.IGNORECASE) is None, res.stdout
    assert "1801.9" in res.stdout, "the finite duration is kept"
    as_json = json.loads(wedgewatch(tmp_path, "scan", str(path), "--json").stdout)
    json.dumps(as_json, allow_nan=False)  # no NaN or infinity anywhere in the findings


def test_a_config_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(b'[server]\nmodel = "\xff\xfe"\n')
    line = one_line(wedgewatch(tmp_path, "serve", str(cfg)), 2)
    assert "c.toml" in line and "UTF-8" in line
