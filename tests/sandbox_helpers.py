"""What the sandbox tests share: the backends under test, their settings, and a look at the host's
process table (the one place every backend's processes are visible, containers' included)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from wedgewatch.base.protocols import Sandbox
from wedgewatch.config import SandboxConfig
from wedgewatch.sandbox import get_sandbox
from wedgewatch.testing import eventually

# On this machine kind podman needs runc (crun fails on the cgroup layout) and explicit ulimits
# (the backend always passes nofile and nproc).
PODMAN_ARGS = ["--runtime", "runc"]


def require_tools(*tools: str) -> None:
    """Fail (never skip) when a system tool is missing: `make install` installs them as root."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.fail(
            f"missing {', '.join(missing)}: run `make install` as root (apt-get install bubblewrap podman runc)"
        )


def settings(kind: str, image: str | None = None, **limits: Any) -> SandboxConfig:
    if kind == "bwrap":
        require_tools("bwrap", "prlimit")
    if kind == "container":
        require_tools("podman", "runc")
        return SandboxConfig(
            kind=kind, container_cli="podman", container_args=PODMAN_ARGS, image=image, **limits
        )
    return SandboxConfig(kind=kind, **limits)


def make(kind: str, instance: Mapping[str, Any], root: Path, cfg: SandboxConfig) -> Sandbox:
    box: Sandbox = get_sandbox(kind).create(dict(instance), root, settings=cfg)
    return box


def host_pids_with(marker: str) -> list[int]:
    """Pids of the host's processes whose command line holds ``marker`` (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def gone(marker: str, within: float = 5.0) -> bool:
    """Wait (``within`` s at most) until no process on the host has ``marker`` in its command line."""
    return eventually(lambda: not host_pids_with(marker), timeout=within, what=f"no process {marker!r}")
