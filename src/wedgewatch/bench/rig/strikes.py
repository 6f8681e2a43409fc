"""The faults the rig deals from outside, to a server and to wedgewatch itself. Each is what the
field sees, done for real: a signal to one process of the server's group (found by the title vLLM
gives its children), the kernel's own reset of the proxy's connections to the engine (``ss -K``),
a SIGKILL of the process group of ``wedgewatch run`` or of a sandbox's command, a file system that
fills up under the ledger, and ``RLIMIT_FSIZE`` on the process that writes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import subprocess
from pathlib import Path

from wedgewatch.bench.procfs import group_pids
from wedgewatch.sandbox.disk import LoopDisk

ENGINE_TITLE = "VLLM::EngineCore"
WORKER_TITLE = "VLLM::Worker"
"""The titles vLLM gives its engine's processes (``setproctitle``): the API server's children."""


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()


def titled(pgid: int, title: str) -> int | None:
    """The live pid in process group ``pgid`` whose command line starts with ``title``."""
    for pid in group_pids(pgid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if cmdline.strip().startswith(title):
            return pid
    return None


def state(pid: int) -> str | None:
    """The process's state letter (``T``: stopped), None once it is gone."""
    try:
        return _stat(pid)[0]
    except OSError:
        return None


def send(pid: int, sig: int) -> bool:
    """``kill(pid, sig)``; False when the process was already gone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def kill_group(pgid: int) -> bool:
    """SIGKILL a whole process group; False when none of it was left."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


async def slow(pid: int, bursts: int, stopped: float, running: float) -> int:
    """``bursts`` times: SIGSTOP for ``stopped`` seconds, then SIGCONT for ``running``: a server
    slowed, never wedged for long. Returns the bursts dealt (fewer if the process went away);
    the process is left running whatever happens."""
    dealt = 0
    try:
        for _ in range(bursts):
            if not send(pid, signal.SIGSTOP):
                break
            dealt += 1
            await asyncio.sleep(stopped)
            send(pid, signal.SIGCONT)
            await asyncio.sleep(running)
    finally:
        send(pid, signal.SIGCONT)
    return dealt


def reset_connections(port: int) -> int:
    """Reset every TCP connection to 127.0.0.1:``port`` (``ss -K``: the kernel aborts each socket
    and sends its peer a RST): the proxy's streams to the engine and the supervisor's scrapes.
    Returns how many sockets were reset."""
    out = subprocess.run(
        ["ss", "-K", "-t", "-n", "dst", "127.0.0.1", "dport", "=", str(port)],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    return sum(1 for line in out.stdout.splitlines()[1:] if line.strip())


def in_sandbox(workdir: Path) -> list[int]:
    """The process groups of the commands running in a sandbox under ``workdir`` (a process whose
    working directory is inside it, and which is not wedgewatch itself)."""
    root, me = str(workdir.resolve()) + os.sep, os.getpgid(0)
    groups: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            pgid = int(_stat(int(entry.name))[2])
        except (OSError, ValueError, IndexError):
            continue
        if (cwd + os.sep).startswith(root) and pgid not in (me, 0):
            groups.add(pgid)
    return sorted(groups)


class LedgerDisk:
    """A small file system of its own under the ledger (an ext4 image, loop-mounted, no blocks
    reserved for root), which ``fill`` fills to the last block, for real, and ``free`` frees."""

    FILLER = ".filler"

    def __init__(self, mountpoint: Path, size_mb: int) -> None:
        mountpoint.mkdir(parents=True, exist_ok=True)
        disk = LoopDisk.create(mountpoint, size_mb)
        if disk is None:
            raise PermissionError("a file system for the ledger needs root (a loop mount)")
        self.disk, self.path = disk, mountpoint

    def fill(self) -> int:
        """Write until the file system refuses (ENOSPC), to its last block; the bytes written."""
        written = 0
        fd = os.open(self.path / self.FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (1 << 20, 1 << 16, 4096, 512):  # big writes first, then the last scraps
                with contextlib.suppress(OSError):
                    while True:
                        written += os.write(fd, b"\0" * size)
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        (self.path / self.FILLER).unlink(missing_ok=True)

    def remove(self) -> None:
        self.free()
        self.disk.remove()


def limit_file_size(pid: int, nbytes: int) -> tuple[int, int]:
    """Set ``pid``'s RLIMIT_FSIZE (soft) to ``nbytes``: a write that would take any file past it
    fails with EFBIG (Python ignores SIGXFSZ), which SQLite reports as a disk I/O error. Returns
    the limits it had, for ``restore_file_size``. Children started meanwhile inherit the limit."""
    old = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (nbytes, old[1]))
    return old


def restore_file_size(pid: int, old: tuple[int, int]) -> bool:
    """Give ``pid`` its file size limit back; False when it is gone."""
    try:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, old)
    except ProcessLookupError:
        return False
    return True
