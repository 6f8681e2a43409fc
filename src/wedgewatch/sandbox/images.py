"""Which container image an instance runs in, named as mini-swe-agent and the SWE-bench harness
name them, and the container CLI's questions about images."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wedgewatch.errors import SandboxError

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


def cli_run(argv: list[str], timeout: float, what: str) -> subprocess.CompletedProcess[str]:
    """Run a container CLI command; a CLI that is missing or hangs is a SandboxError."""
    try:
        return subprocess.run(
            argv,
            env=cli_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise SandboxError(
            f"{what}: the container CLI {argv[0]!r} is not installed "
            "(Debian: apt-get install podman runc; `make install` does it as root)"
        ) from None
    except subprocess.TimeoutExpired:
        raise SandboxError(f"{what}: `{' '.join(argv[:3])} ...` did not answer in {timeout:.0f} s") from None


def image_present(cli: str, image: str) -> bool:
    """Whether the image is in the engine's local storage (no pull)."""
    return cli_run([cli, "image", "inspect", image], 60, f"image {image}").returncode == 0
