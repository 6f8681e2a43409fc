"""A disk quota for a sandbox's directory: a sparse file holding an ext4 file system of
``disk_mb``, loop-mounted on the directory, so everything written there (the work tree, HOME,
TMPDIR) stops at the quota with ENOSPC, however many files it is spread over.

Disk-backed, not RAM-backed (a tmpfs would charge a 4 GiB work tree to memory), and sparse: the
host's disk holds only what was written. Mounting needs root (CAP_SYS_ADMIN); as another user
there is no quota, and ``LoopDisk.create`` returns None so the caller can say so once.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

from wedgewatch.base.errors import SandboxError

log = logging.getLogger(__name__)

_warned = False


def _tool(name: str) -> str:
    found = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
    if found is None:
        raise SandboxError(
            f"sandbox disk_mb: `{name}` is not on PATH (Debian: apt-get install e2fsprogs mount)"
        )
    return found


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxError(f"sandbox disk_mb: {what}: {exc}") from exc
    if done.returncode != 0:
        raise SandboxError(f"sandbox disk_mb: {what}: {done.stderr.strip()[-300:]}")


class LoopDisk:
    """An ext4 image file mounted on ``mountpoint``; ``remove()`` unmounts it and deletes the file."""

    def __init__(self, mountpoint: Path, image: Path) -> None:
        self.mountpoint = mountpoint
        self.image = image

    @classmethod
    def create(cls, mountpoint: Path, size_mb: int) -> LoopDisk | None:
        """Mount a fresh file system of ``size_mb`` MiB on the (empty) ``mountpoint``; None when
        this process cannot mount (not root), after one warning per process."""
        global _warned
        if os.geteuid() != 0:
            if not _warned:
                _warned = True
                log.warning("sandbox disk_mb: not root, so no disk quota (the loop mount needs root)")
            return None
        image = mountpoint.with_name(mountpoint.name + ".disk")
        try:
            with image.open("xb") as f:
                f.truncate(size_mb * 1024 * 1024)
        except OSError as exc:
            raise SandboxError(f"sandbox disk_mb: cannot create {image}: {exc}") from exc
        disk = cls(mountpoint, image)
        try:
            # -m 0: no blocks reserved for root (the sandbox's commands may run as root); lazy
            # init keeps mkfs at milliseconds for any size.
            _run(
                [_tool("mkfs.ext4"), "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1",
                 str(image)],
                f"mkfs.ext4 {image}",
            )  # fmt: skip
            _run([_tool("mount"), "-o", "loop,nosuid,nodev", str(image), str(mountpoint)], f"mount {image}")
            shutil.rmtree(mountpoint / "lost+found", ignore_errors=True)
        except BaseException:
            image.unlink(missing_ok=True)
            raise
        return disk

    def remove(self) -> None:
        """Unmount (lazily, so a process still inside cannot keep it) and delete the image."""
        try:
            _run([_tool("umount"), "-l", str(self.mountpoint)], f"umount {self.mountpoint}")
        except SandboxError as exc:
            log.warning("%s", exc)
        self.image.unlink(missing_ok=True)
