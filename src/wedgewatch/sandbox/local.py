"""The local sandbox: a fresh directory per attempt holding the instance's repository at its base
commit; commands run there with ``bash -c``, in their own process group, with a scrubbed
environment, and are killed (the whole group) at their deadline.

Layout of one sandbox (``<root>/<instance_id>-<random>/``):

    repo/   the working copy (``path``); agents work here
    home/   HOME for every command (a private .gitconfig), so nothing of the user's leaks in
    tmp/    TMPDIR

This is isolation from mistakes, not a security boundary: commands run as the same user.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import SandboxError
from wedgewatch.base.protocols import CommandResult
from wedgewatch.config import SandboxConfig
from wedgewatch.sandbox import groups
from wedgewatch.sandbox.output import read_bounded
from wedgewatch.suites.bundled import is_bundled
from wedgewatch.suites.git import git_env, run_git
from wedgewatch.suites.materialise import materialise

log = logging.getLogger(__name__)

_GITCONFIG = "[user]\n\tname = wedgewatch agent\n\temail = agent@wedgewatch.invalid\n"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:80] or "instance"


def _default_path() -> str:
    # The harness's own interpreter comes first, so `python -m pytest` in a bundled repository finds
    # the same Python (and pytest) that runs wedgewatch.
    parent = os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin"
    return f"{Path(sys.executable).parent}{os.pathsep}{parent}"


def mirror_of(instance: Mapping[str, Any], repos_dir: Path | None) -> Path | None:
    """The local mirror of the instance's repository: ``repos_dir/<owner>__<name>``."""
    return Path(repos_dir) / str(instance.get("repo", "")).replace("/", "__") if repos_dir else None


def has_repository(instance: Mapping[str, Any], repos_dir: Path | None) -> bool:
    """Whether a sandbox can be made for ``instance``: a mirror exists, or it is bundled."""
    mirror = mirror_of(instance, repos_dir)
    return (mirror is not None and mirror.exists()) or is_bundled(dict(instance))


class LocalSandbox:
    """A fresh working copy on the local disk (see the module docstring)."""

    def __init__(self, root: Path, base_commit: str, keep: bool = False) -> None:
        self.root = root
        self.base_commit = base_commit
        self.keep = keep
        self.settings = SandboxConfig()
        self._closed = False

    @property
    def path(self) -> Path:
        return self.root / "repo"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @classmethod
    def create(
        cls,
        instance: Mapping[str, Any],
        root: Path,
        *,
        repos_dir: Path | None = None,
        keep: bool = False,
        settings: SandboxConfig | None = None,
    ) -> LocalSandbox:
        """A new sandbox under ``root`` (a directory never used before) with the instance's
        repository at ``base_commit``: cloned from ``repos_dir/<owner>__<name>`` when that mirror
        exists, else materialised from the bundled suite. SandboxError when neither works.
        ``settings`` is the ``[sandbox]`` section (its limits are for isolating subclasses)."""
        iid = str(instance.get("instance_id", "instance"))
        base = str(instance.get("base_commit") or "")
        # Commands run with the sandbox as their working directory: a relative root would point
        # somewhere else from there.
        root = Path(root).resolve()
        try:
            root.mkdir(parents=True, exist_ok=True)
            top = Path(tempfile.mkdtemp(prefix=f"{_safe(iid)}-", dir=root))
        except OSError as exc:
            raise SandboxError(f"cannot create a sandbox under {root}: {exc}") from exc
        box = cls(top, base, keep)
        box.settings = settings or box.settings
        try:
            box._prepare()
            for sub in ("home", "tmp"):
                (top / sub).mkdir()
            (top / "home" / ".gitconfig").write_text(_GITCONFIG)
            mirror = mirror_of(instance, repos_dir)
            if mirror is not None and mirror.exists():
                box._clone(mirror)
            elif is_bundled(dict(instance)):
                materialise(instance, box.path)
                box.base_commit = base or run_git(box.path, "rev-parse", "HEAD").strip()
            else:
                where = f" (no mirror at {mirror})" if mirror is not None else ""
                raise SandboxError(f"{iid}: no repository for {instance.get('repo')!r}{where}")
        except BaseException:
            box.close(force=True)
            raise
        log.debug("sandbox %s for %s at %s", top, iid, box.base_commit)
        return box

    def _clone(self, mirror: Path) -> None:
        if not self.base_commit:
            raise SandboxError(f"cannot check out {mirror}: the instance has no base_commit")
        run_git(self.root, "clone", "-q", "--local", "--no-checkout", str(mirror), "repo", timeout=600)
        run_git(self.path, "checkout", "-q", "--detach", self.base_commit, timeout=600)
        # Later history (the real fix) should not be one `git log --all` away from the agent.
        run_git(self.path, "remote", "remove", "origin")
        for ref in run_git(self.path, "for-each-ref", "--format=%(refname)").split():
            run_git(self.path, "update-ref", "-d", ref)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The whole environment a command sees: nothing of ours beyond PATH and the locale."""
        env = {
            "PATH": _default_path(),
            "HOME": str(self.home),
            "TMPDIR": str(self.root / "tmp"),
            "LANG": os.environ.get("LANG") or "C.UTF-8",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
            "TERM": "dumb",
            # A .pyc is keyed on the source's mtime in whole seconds and its size: an edit that
            # keeps the size, made within a second of the last test run, would run the old code.
            "PYTHONDONTWRITEBYTECODE": "1",
            # The interpreter is the harness's, so pytest would load every plugin of the harness's
            # environment (xdist, asyncio, timeout, ...) into the task's tests: ours, not the
            # task's (a SWE-bench image holds only the repository's requirements), and half of each
            # test run's start-up. A repository that needs a plugin names it in its own pytest
            # config (`-p NAME` in addopts, `pytest_plugins` in a conftest), which still loads it.
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        }
        if extra:
            env.update(extra)
        return env

    def _argv(self, command: str, env: Mapping[str, str] | None) -> list[str]:
        """The argv that runs ``command`` (an isolating backend wraps it)."""
        return ["bash", "-c", command]

    def _cwd(self) -> Path:
        return self.path

    def _spawn_env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        """The environment of the process started (a container's CLI passes the command's on)."""
        return self.env(extra)

    def _spawn_options(self) -> dict[str, Any]:
        """Extra ``Popen`` arguments of a command."""
        return {}

    def _prepare(self) -> None:
        """Called once by ``create`` before the repository is made (an isolating backend checks
        its tools and sets up its limits here)."""

    def _after_command(self, timed_out: bool) -> None:
        """Called after every command, its process group killed (an isolating backend kills what
        left the group too)."""

    def run(self, command: str, timeout: float, env: Mapping[str, str] | None = None) -> CommandResult:
        """Run ``bash -c command`` in the working copy; stdout and stderr merged; the whole process
        group is killed with SIGKILL at ``timeout`` (``timed_out=True``, ``exit_code=None``) and
        after the command ends, so nothing it started in the background outlives it."""
        if self._closed:
            raise SandboxError(f"sandbox {self.root} is closed")
        started = time.monotonic()
        try:
            proc = groups.spawn(
                self._argv(command, env),
                cwd=self._cwd(),
                env=self._spawn_env(env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                **self._spawn_options(),
            )
        except OSError as exc:
            raise SandboxError(f"cannot run a command in {self.path}: {exc}") from exc
        assert proc.stdout is not None
        deadline = started + timeout
        with groups.owned(proc):
            try:
                output, timed_out = read_bounded(proc.stdout, deadline)
                # EOF is not the end: bash may still be exiting. Wait for its exit without reaping
                # it, so its process group id cannot be reused before the leftovers are killed.
                timed_out = timed_out or not _exited(proc.pid, deadline)
            finally:
                _kill_group(proc.pid)
                proc.stdout.close()
            code = proc.wait()
            self._after_command(timed_out)
        return CommandResult(
            command=command,
            exit_code=None if timed_out else code,
            output=output,
            duration=time.monotonic() - started,
            timed_out=timed_out,
        )

    def diff(self) -> str:
        """``git diff`` of the working tree against base_commit, new untracked files included
        (.gitignore respected), as SWE-bench's model_patch. The real index is left untouched."""
        index = self.root / "tmp" / "wedgewatch-diff-index"
        env = git_env({"GIT_INDEX_FILE": str(index), "HOME": str(self.home)})
        real = self.path / ".git" / "index"
        try:
            # Starting from a copy of the real index keeps git's stat cache: no re-hashing every file.
            # copy2 keeps the index's mtime, which git's stat cache needs: an entry as new as the
            # index file is "racily clean" and its file is read. A copy that looked newer made git
            # trust a same-size edit made in the second of the checkout, and the patch came out empty.
            if real.is_file():
                shutil.copy2(real, index)
            else:
                run_git(self.path, "read-tree", self.base_commit, env=env)
            run_git(self.path, "add", "-A", env=env)
            return run_git(
                self.path,
                "diff",
                "--cached",
                "--binary",
                "--no-color",
                "--no-ext-diff",
                self.base_commit,
                env=env,
            )
        finally:
            index.unlink(missing_ok=True)

    def close(self, force: bool = False) -> None:
        """Remove the sandbox directory, unless it is kept for debugging (``keep``)."""
        self._closed = True
        if self.keep and not force:
            return
        shutil.rmtree(self.root, ignore_errors=True)


def _exited(pid: int, deadline: float) -> bool:
    """Wait until ``pid`` has exited (a zombie, not reaped) or the deadline passes."""
    pause = 0.001
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
