"""A real Ray cluster for the tests (``ray start --head --block`` on 127.0.0.1, 2 CPUs, no
dashboard, a small object store), and the process bookkeeping the Ray tests check with: which
processes descend from a pid, and whether exactly those processes still run.

The cluster is stopped by signalling the one ``ray start`` process the test started (it stops
every process it started), never with ``ray stop``, which would stop every Ray on the machine."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from wedgewatch.testing import eventually

READY = "Ray runtime started"
START_TIMEOUT = 180.0  # seconds: a loaded 2-core machine has taken 25 to start one


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RayCluster:
    proc: subprocess.Popen[bytes]
    address: str
    log: Path
    temp: Path

    def processes(self) -> set[tuple[int, int]]:
        return descendants(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # ray start --block stops what it started on SIGTERM
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        shutil.rmtree(self.temp, ignore_errors=True)


PORT_TRIES = 3


class PortTaken(RuntimeError):
    """Ray's GCS could not bind the port picked for it."""


def start_cluster(root: Path) -> RayCluster:
    """A head node on a free port. Its temporary directory is its own (short: Ray's socket paths
    must fit 107 bytes), so it writes no /tmp/ray/ray_current_cluster for another Ray to find.
    The port is free when picked but bound seconds later by Ray's GCS, and another test's server
    can take it in between (seen once: "Failed to start the grpc server"): then a new port."""
    for _ in range(PORT_TRIES - 1):
        try:
            return _start_head(root)
        except PortTaken:
            continue
    return _start_head(root)


def _start_head(root: Path) -> RayCluster:
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="wwray-", dir="/tmp")
    log = root / "ray-start.log"
    argv = [
        sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
        "--port", str(port), "--node-ip-address", "127.0.0.1", "--num-cpus", "2",
        "--include-dashboard", "false", "--object-store-memory", str(80 * 1024 * 1024),
        "--disable-usage-stats", "--temp-dir", temp,
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    cluster = RayCluster(proc, f"127.0.0.1:{port}", log, Path(temp))
    try:  # up, or exited: either ends the wait
        eventually(lambda: READY in log.read_text(errors="replace") or proc.poll() is not None, START_TIMEOUT)
    except AssertionError:
        pass
    text = log.read_text(errors="replace")
    if READY not in text:
        cluster.stop()
        kind = PortTaken if "Failed to start the grpc server" in text else RuntimeError
        raise kind(f"ray start did not come up: {text[-3000:]}")
    return cluster


def outward_address() -> str:
    """This machine's address on its default route (no packet is sent: a UDP socket's connect only
    picks the interface), as a worker node on another host would reach it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1: routed like any outside address, never used
        return str(s.getsockname()[0])


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a live process, or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if fields[0] == "Z":
        return None  # a zombie runs nothing
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> set[tuple[int, int]]:
    """``root`` and every process under it, as (pid, start time): a pid reused later by another
    process does not count as the same one."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            children.setdefault(st[0], []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if (st := _stat(pid)) is not None:
            found.add((pid, st[1]))
            todo.extend(children.get(pid, []))
    return found


def still_running(processes: set[tuple[int, int]]) -> set[tuple[int, int]]:
    return {(pid, start) for pid, start in processes if (st := _stat(pid)) is not None and st[1] == start}


def titled(prefix: str) -> list[int]:
    """Processes whose command line starts with ``prefix`` (Ray titles a worker ``ray::<task>``
    while it runs a task)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(prefix.encode()):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
