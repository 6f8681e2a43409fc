"""Resource limits of an isolating sandbox's commands: rlimits set by ``prlimit`` (util-linux), and a
pids cgroup of the sandbox's own when the host lets us make one.

RLIMIT_NPROC does not hold root back (the kernel exempts the initial namespace's root from it),
so a fork bomb run by root is stopped only by a cgroup's ``pids.max``. wedgewatch run as root
makes one cgroup per sandbox (cgroup v1's ``pids`` hierarchy, or v2 where the root delegates the
``pids`` controller); as another user RLIMIT_NPROC applies, counted over all that user's processes.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import time
from pathlib import Path

from wedgewatch.config import SandboxConfig

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
_V1 = Path("/sys/fs/cgroup/pids")
_V2 = Path("/sys/fs/cgroup")


def prlimit_argv(cfg: SandboxConfig, nproc: int | None = None) -> list[str]:
    """``prlimit`` with the configured limits, ready for the command's argv to follow.
    ``nproc`` replaces ``processes`` as RLIMIT_NPROC (see ``user_nproc``)."""
    return [
        "prlimit",
        f"--cpu={cfg.cpu_seconds}",
        f"--as={cfg.memory_mb * _MIB}",
        f"--fsize={cfg.file_size_mb * _MIB}",
        f"--nproc={nproc or cfg.processes}",
        f"--nofile={cfg.open_files}",
        "--",
    ]


def user_nproc(processes: int) -> int:
    """RLIMIT_NPROC that lets a sandbox hold ``processes`` more: the limit counts every process
    of the user, so a user already running hundreds would otherwise be unable to fork at all."""
    uid, mine = os.getuid(), 0
    for entry in Path("/proc").iterdir():
        try:
            mine += entry.name.isdigit() and entry.stat().st_uid == uid
        except OSError:
            continue
    return mine + processes


def _pids_root() -> Path | None:
    if (_V1 / "cgroup.procs").is_file() and os.access(_V1, os.W_OK):
        return _V1
    controllers = _V2 / "cgroup.subtree_control"
    try:
        if "pids" in controllers.read_text().split() and os.access(_V2, os.W_OK):
            return _V2
    except OSError:
        pass
    return None


class PidsCgroup:
    """One sandbox's pids cgroup: a process limit over everything its commands start."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, limit: int) -> PidsCgroup | None:
        """A new cgroup holding at most ``limit`` processes; None when the host offers none."""
        root = _pids_root()
        if root is None:
            return None
        path = root / f"wedgewatch-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(limit))
        except OSError as exc:
            log.warning("no pids cgroup for a sandbox (%s): only RLIMIT_NPROC limits its processes", exc)
            return None
        return cls(path)

    def enter_argv(self) -> list[str]:
        """argv prefix that moves the command into the cgroup before it starts anything."""
        procs = str(self.path / "cgroup.procs")
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', procs]

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> None:
        """SIGKILL every process in the cgroup (again, for those forked meanwhile)."""
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill()
        for _ in range(100):  # a killed process leaves the cgroup once it is reaped
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)
        log.warning("cannot remove the sandbox cgroup %s", self.path)
