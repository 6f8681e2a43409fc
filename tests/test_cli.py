"""The command line's contract: bad input is one line on stderr and exit 2."""

from __future__ import annotations

import subprocess
import sys


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", *args], capture_output=True, text=True, timeout=60
    )


def test_version() -> None:
    r = _run("version")
    assert r.returncode == 0
    assert r.stdout.strip() == __import__("wedgewatch").__version__


def test_unknown_flag_is_one_line_naming_the_flag() -> None:
    r = _run("version", "--bogus")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "--bogus" in lines[0]


def test_no_args_prints_help() -> None:
    r = _run()
    assert r.returncode == 0
    assert "Usage" in r.stdout


def test_help_lists_every_command_in_the_order_a_user_meets_them() -> None:
    out = _run("--help").stdout
    listed = [line.split()[0] for line in out.split("Commands:")[1].splitlines() if line.startswith("  ")]
    assert listed == [
        "demo", "sim", "proxy", "serve", "wrap", "run", "report", "export", "import-report",
        "audit", "compare", "lives", "scan", "plan", "ledger", "config", "bench", "version",
    ]  # fmt: skip
