"""Running git for the suite and the sandbox, isolated from the user's git configuration.

A user's ``~/.gitconfig`` can change what ``git diff`` prints (``diff.noprefix``, external diff
drivers, colour) or make ``git commit`` sign; either would break patches or deterministic shas.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from wedgewatch.base.errors import SandboxError

# Keys a git process may inherit from our own environment; everything else is dropped.
_KEEP = ("PATH", "LANG", "LC_ALL", "TZ")


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment in which git reads no system or global config and never prompts."""
    env = {k: os.environ[k] for k in _KEEP if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_PAGER="cat",
        HOME=os.environ.get("HOME", "/nonexistent"),
    )
    if extra:
        env.update(extra)
    return env


def run_git(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = 120,
) -> str:
    """Run ``git args`` in ``cwd`` and return stdout; any failure is a SandboxError with stderr."""
    argv = ["git", "-c", "core.autocrlf=false", "-c", "commit.gpgsign=false", *args]
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=dict(env) if env is not None else git_env(),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxError(f"git {' '.join(args)} in {cwd}: {exc}") from exc
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise SandboxError(f"git {' '.join(args)} in {cwd} exited {proc.returncode}: {' | '.join(detail)}")
    return proc.stdout
