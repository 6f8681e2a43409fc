"""Which container image an instance runs in, named as mini-swe-agent and the SWE-bench harness
name them, and the container CLI's questions about images."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import SandboxError
from wedgewatch.sandbox import groups

# The variables a container CLI needs to find its engine and its storage; nothing else of ours.
_CLI_ENV = ("PATH", "HOME", "USER", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "TMPDIR")
_CLI_PREFIXES = ("DOCKER_", "CONTAINER_", "CONTAINERS_", "PODMAN_")


def docker_id(instance_id: str) -> str:
    """The instance id as SWE-bench's image names spell it: ``__`` is not allowed in an image
    name, so it becomes the magic ``_1776_``; lower case."""
    return instance_id.replace("__", "_1776_").lower()


def image_for(instance: Mapping[str, Any], override: str | None = None) -> str:
    """The image of ``instance``: ``override`` (``[sandbox] image``, where ``{instance_id}`` is
    filled in with the docker-compatible id), else the instance's own ``image_name``,
    ``docker_image`` or ``image``, else SWE-bench's ``swebench/sweb.eval.x86_64.<id>:latest``
    (fully qualified, as mini-swe-agent writes it, so podman never asks which registry)."""
    iid = str(instance.get("instance_id", ""))
    if override:
        return override.replace("{instance_id}", docker_id(iid))
    for key in ("image_name", "docker_image", "image"):
        value = instance.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return f"docker.io/swebench/sweb.eval.x86_64.{docker_id(iid)}:latest"


def cli_env() -> dict[str, str]:
    """The environment of a container CLI process."""
    return {k: v for k, v in os.environ.items() if k in _CLI_ENV or k.startswith(_CLI_PREFIXES)}


def is_podman(cli: str) -> bool:
    return "podman" in Path(cli).name


def cli_run(
    argv: list[str], timeout: float, what: str, *, tracked: bool = True, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a container CLI command in a process group of the run's list (``groups.spawn``: a run
    that stops kills it); a CLI that is missing or hangs is a SandboxError. ``tracked=False`` is
    for the clean-up (``rm -f``) that must still run while the run is stopping. ``cwd``: where the
    CLI runs; ``run`` is given the sandbox's own directory, because podman's conmon (which lives
    as long as the container) writes an ``oom`` file into its working directory when the
    container is OOM-killed."""
    popen: dict[str, Any] = {"env": cli_env(), "stdin": subprocess.DEVNULL, "cwd": cwd}
    popen.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if tracked:
            proc = groups.spawn(argv, **popen)
        else:
            proc = subprocess.Popen(argv, start_new_session=True, **popen)
    except FileNotFoundError:
        raise SandboxError(
            f"{what}: the container CLI {argv[0]!r} is not installed "
            "(Debian: apt-get install podman runc; `make install` does it as root)"
        ) from None
    with groups.owned(proc) if tracked else contextlib.nullcontext():
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc.pid)
            proc.communicate()
            raise SandboxError(
                f"{what}: `{' '.join(argv[:3])} ...` did not answer in {timeout:.0f} s"
            ) from None
        finally:
            _kill(proc.pid)
    text = (out or b"").decode("utf-8", errors="replace"), (err or b"").decode("utf-8", errors="replace")
    return subprocess.CompletedProcess(argv, proc.returncode, *text)


def _kill(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def image_present(cli: str, image: str) -> bool:
    """Whether the image is in the engine's local storage (no pull)."""
    return cli_run([cli, "image", "inspect", image], 60, f"image {image}").returncode == 0
