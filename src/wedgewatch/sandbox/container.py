"""The container sandbox: one container per attempt from the instance's image (SWE-bench's, or
the instance's own ``image_name``), driven through the Docker or the Podman CLI.

The container is started detached on a sleeping shell (as mini-swe-agent starts its own) with
no network unless ``[sandbox] network``, the limits of ``[sandbox]`` (``--pids-limit``, memory,
``--ulimit`` nofile/nproc/cpu/fsize, the repository directory on a tmpfs of ``disk_mb``) and
``container_args``. Each command is a ``<cli> exec`` of
``bash -lc`` in the repository directory (``/testbed``); when it ends, everything it started is
killed (every process of the container but its first, from inside), and at its timeout
the same is done from outside. The patch is ``git diff`` inside; the container is removed
(``rm -f``) when the sandbox closes, whatever happened.

The image must be in the engine's local storage (or ``[sandbox] pull``): a missing image is a
SandboxError naming it, so the attempt ends ``harness_error`` and the run goes on.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import secrets
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import SandboxError
from wedgewatch.config import SandboxConfig
from wedgewatch.sandbox.images import cli_env, cli_run, image_for, image_present, is_podman
from wedgewatch.sandbox.local import LocalSandbox, _safe

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
LABEL = "wedgewatch.sandbox"
# PID 1 of the container: it keeps it up and reaps what is orphaned inside (a bare `sleep` as PID 1
# would leave every killed orphan a zombie, and zombies count against --pids-limit).
KEEPALIVE = ["bash", "-c", "while :; do sleep 3600 & wait; done"]
# Every process in the container but PID 1 and this shell, by bash builtins only (bash's own
# `kill -1` is a process group, not "everyone"). Stopped first, in passes until nothing new
# appears (a stopped process cannot fork: a fork bomb cannot refill what is killed), then killed.
_EACH = 'for __p in /proc/[0-9]*; do __p=${__p#/proc/}; [ "$__p" -ne 1 ] && [ "$__p" -ne $$ ] && '
_KILL_REST = (
    f"for __i in 1 2 3 4 5 6 7 8; do {_EACH}kill -STOP $__p 2>/dev/null; done; done; "
    f"for __i in 1 2; do {_EACH}kill -KILL $__p 2>/dev/null; done; done"
)
# The command (stderr merged inside: the CLI relays the two streams apart, out of order), then
# whatever it left running; the status is the command's.
_WRAP = f'exec 2>&1; bash -lc "$1"; __ww_rc=$?; {_KILL_REST}; exit $__ww_rc'


# Containers not removed yet. A stopped run abandons its agent threads, which remove their own
# containers as they unwind; one still there when the interpreter exits is removed then.
_LIVE: set[tuple[str, str]] = set()


@atexit.register
def _remove_leftovers() -> None:
    for cli, name in sorted(_LIVE):
        with contextlib.suppress(SandboxError):
            cli_run(
                [cli, "rm", "-f", *(["-t", "0"] if is_podman(cli) else []), name], 60, "rm", tracked=False
            )
    _LIVE.clear()


def _disk_argv(cli: str, cfg: SandboxConfig) -> list[str]:
    """The repository directory on a tmpfs of ``disk_mb``, filled from the image's own (a
    container's writable layer has no quota on overlay over ext4, the common case)."""
    if not cfg.disk_mb:
        return []
    if is_podman(cli):  # podman copies the image's directory into a --tmpfs (tmpcopyup, its default)
        return ["--tmpfs", f"{cfg.workdir}:rw,size={cfg.disk_mb}m,tmpcopyup"]
    # Docker's --tmpfs starts empty; an anonymous volume on tmpfs is filled from the image. Not
    # run here: no Docker engine on the development host (docs/sandboxes.md).
    opts = f"volume-opt=type=tmpfs,volume-opt=device=tmpfs,volume-opt=o=size={cfg.disk_mb}m"
    return ["--mount", f"type=volume,dst={cfg.workdir},{opts}"]


class ContainerSandbox(LocalSandbox):
    """One container of the instance's image (see the module docstring)."""

    container: str = ""
    image: str = ""

    @property
    def path(self) -> Path:
        """The repository's directory inside the container (what agents are told to work in)."""
        return Path(self.settings.workdir)

    @classmethod
    def create(
        cls,
        instance: Mapping[str, Any],
        root: Path,
        *,
        repos_dir: Path | None = None,
        keep: bool = False,
        settings: SandboxConfig | None = None,
    ) -> ContainerSandbox:
        """Start a container of the instance's image; ``root`` keeps only the host side (the
        directory commands' CLI processes run in). ``repos_dir`` is not used: the image holds the
        repository."""
        iid = str(instance.get("instance_id", "instance"))
        root = Path(root).resolve()
        try:
            root.mkdir(parents=True, exist_ok=True)
            top = Path(tempfile.mkdtemp(prefix=f"{_safe(iid)}-", dir=root))
        except OSError as exc:
            raise SandboxError(f"cannot create a sandbox under {root}: {exc}") from exc
        box = cls(top, str(instance.get("base_commit") or ""), keep)
        box.settings = settings or box.settings
        box.image = image_for(instance, box.settings.image)
        try:
            box._start(iid)
        except BaseException:
            box.close(force=True)
            raise
        return box

    @property
    def cli(self) -> str:
        return self.settings.container_cli

    def _start(self, iid: str) -> None:
        cfg = self.settings
        if shutil.which(self.cli) is None:
            raise SandboxError(
                f"sandbox kind container: `{self.cli}` is not on PATH "
                "(Debian: apt-get install podman runc; `make install` does it as root)"
            )
        if not image_present(self.cli, self.image):
            if not cfg.pull:
                raise SandboxError(
                    f"{iid}: image {self.image} is not in {self.cli}'s local storage "
                    f"(`{self.cli} pull {self.image}`, or build it; [sandbox] pull = true pulls it)"
                )
            pulled = cli_run([self.cli, "pull", self.image], cfg.pull_timeout, f"pull {self.image}")
            if pulled.returncode != 0:
                raise SandboxError(f"{iid}: cannot pull image {self.image}: {pulled.stderr.strip()[-300:]}")
        self.container = f"wedgewatch-{_safe(iid)[:40].lower()}-{secrets.token_hex(4)}"
        argv = [self.cli, "run", "-d", "--name", self.container, "--label", f"{LABEL}=1"]
        argv += ["-w", cfg.workdir, "--pids-limit", str(cfg.processes), "--memory", f"{cfg.memory_mb}m"]
        for name, value in (
            ("nofile", cfg.open_files),
            ("nproc", cfg.processes),
            ("cpu", cfg.cpu_seconds),
            ("fsize", cfg.file_size_mb * _MIB),
        ):
            argv += ["--ulimit", f"{name}={value}:{value}"]
        argv += ["--tmpfs", f"/tmp:rw,mode=1777,size={cfg.tmp_size_mb}m", *_disk_argv(self.cli, cfg)]
        if not cfg.network:
            argv += ["--network", "none"]
        argv += [*cfg.container_args, self.image, *KEEPALIVE]
        started = cli_run(argv, 300, f"{iid}: {self.cli} run", cwd=self.root)
        if started.returncode != 0:
            self.container = ""
            raise SandboxError(
                f"{iid}: cannot start a container of {self.image}: {started.stderr.strip()[-500:]}"
            )
        _LIVE.add((self.cli, self.container))
        log.debug("container %s of %s for %s", self.container, self.image, iid)

    def _cwd(self) -> Path:
        return self.root

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """What a command gets on top of the image's own environment (PATH and the rest)."""
        env = {"PAGER": "cat", "GIT_PAGER": "cat", "TERM": "dumb", "PYTHONDONTWRITEBYTECODE": "1"}
        env.update(extra or {})
        return env

    def _spawn_env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        return cli_env()

    def _exec_argv(self, argv: list[str], env: Mapping[str, str] | None = None) -> list[str]:
        flags = [f"--env={k}={v}" for k, v in self.env(env).items()]
        return [self.cli, "exec", "-w", self.settings.workdir, *flags, self.container, *argv]

    def _argv(self, command: str, env: Mapping[str, str] | None) -> list[str]:
        return self._exec_argv(["bash", "-c", _WRAP, "bash", command], env)

    def _after_command(self, timed_out: bool) -> None:
        # Killing the CLI does not stop what it started inside: a command that timed out (its
        # wrapper killed with the CLI) is ended from inside by another exec.
        if timed_out:
            cli_run(self._exec_argv(["bash", "-c", f"{_KILL_REST}; true"]), 60, "kill")

    def diff(self) -> str:
        """``git diff`` inside against base_commit (HEAD when the instance has none), untracked
        files included, through a scratch index so the repository's own is left alone."""
        base = shlex.quote(self.base_commit or "HEAD")
        script = (
            # cp -p: the copy keeps the index's mtime, which git's racy-clean check needs (local.py).
            "export GIT_INDEX_FILE=$(mktemp); cp -p .git/index $GIT_INDEX_FILE 2>/dev/null; "
            "git add -A >/dev/null && "
            f"git -c core.fileMode=false diff --cached --binary --no-color --no-ext-diff {base}; "
            "rc=$?; rm -f $GIT_INDEX_FILE; exit $rc"
        )
        res = cli_run(self._exec_argv(["bash", "-c", script]), 600, f"git diff in {self.container}")
        if res.returncode != 0:
            raise SandboxError(f"git diff in {self.container} exited {res.returncode}: {res.stderr[-300:]}")
        return res.stdout

    def close(self, force: bool = False) -> None:
        """Remove the container (always: a container kept would hold its resources) and the
        host-side directory."""
        if self.container:
            argv = [self.cli, "rm", "-f", *(["-t", "0"] if is_podman(self.cli) else []), self.container]
            try:
                res = cli_run(argv, 120, f"rm {self.container}", tracked=False)
                if res.returncode != 0:
                    log.warning("cannot remove container %s: %s", self.container, res.stderr.strip())
            except SandboxError as exc:
                log.warning("cannot remove container %s: %s", self.container, exc)
            _LIVE.discard((self.cli, self.container))
            self.container = ""
        self._closed = True
        shutil.rmtree(self.root, ignore_errors=True)
