"""``wedgewatch view`` on the command line: bad input is one line and exit 2; ``serve --view``
serves the page beside the stack, in a process of its own that ends with ``serve``; without
``--view`` the commands print the line that starts it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import launch
from wedgewatch.testing import eventually
from wedgewatch.view.child import NICE

PY = [sys.executable, "-m", "wedgewatch"]


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    for args, word in (
        (["view", str(tmp_path / "none.sqlite")], "does not exist"),
        (["view", str(tmp_path / "none.sqlite"), "--proxy", "ftp://x"], "--proxy"),
    ):
        r = subprocess.run([*PY, *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert word in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    (tmp_path / "empty.sqlite").write_text("")
    r = subprocess.run(
        [*PY, "view", str(tmp_path / "empty.sqlite")], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and "not a wedgewatch ledger" in r.stderr


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize("with_view", [True, False])
def test_serve_prints_the_view_or_serves_it_until_it_stops(tmp_path: Path, with_view: bool) -> None:
    ledger = tmp_path / "l.sqlite"
    (tmp_path / "c.toml").write_text(
        f'[server]\nprofile = "sim"\nlog_dir = "{tmp_path / "logs"}"\n[server.warmup]\ncount = 0\n[run]\nledger = "{ledger}"\n'
    )
    argv = [*PY, "serve", str(tmp_path / "c.toml"), "--port", "0", *(["--view"] if with_view else [])]
    serve = launch(argv, tmp_path / "serve.log", timeout=120)
    try:
        line = eventually(
            lambda: next(
                (x for x in serve.log().splitlines() if x.startswith(("view on ", "watch it live"))), None
            ),
            timeout=120,
            what="the view's line on stderr",
        )
        if not with_view:
            assert line == f"watch it live: wedgewatch view {ledger}"
            return
        url = line.removeprefix("view on ")
        assert url.startswith("http://127.0.0.1:")
        assert eventually(lambda: _get(url + "serve") == 200, timeout=60)
        # Best effort beside the stack: the view's process runs at a lower priority than serve's.
        (pid,) = [p for p in _pids() if str(ledger) in _cmdline(p) and "--until-stdin-closes" in _cmdline(p)]
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(
            19, os.getpriority(os.PRIO_PROCESS, serve.proc.pid) + NICE
        )
    finally:
        serve.proc.send_signal(signal.SIGINT)
        serve.proc.wait(timeout=60)

    # The view's process ends with serve's: its port no longer answers.
    def gone() -> bool:
        try:
            _get(url)
        except (urllib.error.URLError, ConnectionError, OSError):
            return True
        return False

    eventually(gone, timeout=60, what="the view to end with serve")
    assert os.path.exists(ledger)
