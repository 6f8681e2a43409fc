"""Wedge evidence and stopping a stopped server, on real processes (no vLLM needed): a SIGSTOPped
Python process is dumped by py-spy without suspending it, its group's processes are all found,
and a stop continues it so its SIGTERM is acted on at once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_helpers import state
from wedgewatch.supervisor import evidence
from wedgewatch.supervisor.process import LocalServer, group_alive
from wedgewatch.testing import eventually

# A leader with one child in its group, both Python, both asleep in a function named for the test.
SCRIPT = """
import subprocess, sys, time
def waiting_for_the_worker():
    time.sleep(600)
child = subprocess.Popen([sys.executable, "-c", "import time\\ndef the_worker():\\n    time.sleep(600)\\nthe_worker()"])
print(child.pid, flush=True)
waiting_for_the_worker()
"""


@pytest.fixture
def group() -> Iterator[tuple[subprocess.Popen[str], int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    yield proc, child
    if group_alive(proc.pid):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_group_pids_lists_the_leader_first_then_its_group(group: tuple[subprocess.Popen[str], int]) -> None:
    proc, child = group
    assert evidence.group_pids(proc.pid) == [proc.pid, child]
    assert evidence.pgid_of(child) == proc.pid


async def test_capture_dumps_a_stopped_process_and_says_what_it_kept(
    group: tuple[subprocess.Popen[str], int], tmp_path: Path
) -> None:
    proc, child = group
    assert evidence.pyspy_program() is not None, "py-spy is installed by make install (the evidence extra)"
    eventually(lambda: "the_worker" in _stack(child), timeout=30, what="the child inside the_worker")
    log = tmp_path / "life-x.log"
    log.write_text("".join(f"line {i}\n" for i in range(500)))
    os.kill(child, signal.SIGSTOP)
    # A sleeping process is woken to act on the signal and reads R until it is scheduled and stops:
    # on a loaded machine, for a while (the capture once found it R).
    eventually(lambda: state(child) == "T", timeout=30, what="the child stopped")
    where = evidence.evidence_dir(log, "life-x")
    kept = await evidence.capture(where, proc.pid, "http://127.0.0.1:9", log, None, None)
    os.kill(child, signal.SIGCONT)

    assert where == tmp_path / "life-x.wedge" and kept["dir"] == str(where)
    assert kept["pids"] == [proc.pid, child]
    dumps = {d["pid"]: d for d in kept["py_spy"]}
    assert dumps[child]["ok"] and dumps[child]["state"] == "T"
    assert "the_worker" in (where / dumps[child]["file"]).read_text()
    assert "waiting_for_the_worker" in (where / dumps[proc.pid]["file"]).read_text()
    tail = (where / "log-tail.txt").read_text().splitlines()
    assert tail[0] == "line 300" and tail[-1] == "line 499"
    assert kept["metrics"] == {"ok": False, "error": "no HTTP session"}


def _stack(pid: int) -> str:
    program = evidence.pyspy_program()
    assert program is not None
    return subprocess.run(
        [program, "dump", "--nonblocking", "--pid", str(pid)], capture_output=True, text=True, check=False
    ).stdout


def test_stopping_a_stopped_server_continues_it_so_sigterm_ends_it(tmp_path: Path) -> None:
    server = LocalServer(
        [sys.executable, "-c", "import time\ntime.sleep(600)"], "http://127.0.0.1:9", tmp_path / "s.log"
    )
    server.start()
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    eventually(lambda: state(server.pid or 0) == "T", what="the server stopped")
    # SIGTERM alone would stay pending for the whole grace and end in SIGKILL (-9).
    code = asyncio.run(asyncio.to_thread(server.stop, 120.0))
    assert code == -signal.SIGTERM
    assert not group_alive(server.pid)
