"""The bubblewrap sandbox: the local sandbox's fresh working copy, with every command run by
``bwrap`` in namespaces of its own.

What a command sees and may do (docs/sandboxes.md has the measured figures):

- the host's file system read-only; writable only the sandbox's directory (the work tree, its
  HOME and TMPDIR) and a private ``/tmp`` (a tmpfs of ``tmp_size_mb``);
- no network (a network namespace with loopback only, its own), unless ``[sandbox] network``;
- its own PID namespace (no process outside is visible, so none can be signalled), no
  capabilities, a new session (no terminal injection);
- rlimits (CPU seconds, address space, file size, open files, processes) and, when wedgewatch
  runs as root, a pids cgroup of the sandbox's own, so a fork bomb stops at ``processes``, and a
  disk quota (``disk_mb``: the sandbox's directory is a loop-mounted file system of that size);
- killed as a whole at its timeout: the process group, then everything left in its cgroup, and
  the namespace dies with its first process (``--die-with-parent``).

The agent itself (and so its LLM calls) runs outside, in wedgewatch's process.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping

from wedgewatch.base.errors import SandboxError
from wedgewatch.sandbox.disk import LoopDisk
from wedgewatch.sandbox.limits import PidsCgroup, prlimit_argv, user_nproc
from wedgewatch.sandbox.local import LocalSandbox

INSTALL_HINT = "install bubblewrap (Debian: apt-get install bubblewrap; `make install` does it as root)"


class BwrapSandbox(LocalSandbox):
    """A LocalSandbox whose commands run under bubblewrap (see the module docstring)."""

    _cgroup: PidsCgroup | None = None
    _disk: LoopDisk | None = None

    def _prepare(self) -> None:
        for tool in ("bwrap", "prlimit"):
            if shutil.which(tool) is None:
                hint = INSTALL_HINT if tool == "bwrap" else "install util-linux"
                raise SandboxError(f"sandbox kind bwrap: `{tool}` is not on PATH: {hint}")
        self._cgroup = PidsCgroup.create(self.settings.processes)
        if self.settings.disk_mb:
            self._disk = LoopDisk.create(self.root, self.settings.disk_mb)

    def _argv(self, command: str, env: Mapping[str, str] | None) -> list[str]:
        cfg = self.settings
        root = str(self.root)
        if self._cgroup is not None:
            argv = [*self._cgroup.enter_argv(), *prlimit_argv(cfg)]
        else:  # RLIMIT_NPROC alone: it counts all of this user's processes
            argv = prlimit_argv(cfg, user_nproc(cfg.processes))
        argv += ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        if cfg.network:
            argv.append("--share-net")
        argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        argv += ["--size", str(cfg.tmp_size_mb * 1024 * 1024), "--tmpfs", "/tmp"]
        argv += ["--bind", root, root, "--chdir", str(self.path), "--", "bash", "-c", command]
        return argv

    def _after_command(self, timed_out: bool) -> None:
        if self._cgroup is not None:
            self._cgroup.kill()

    def close(self, force: bool = False) -> None:
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None
        if self._disk is not None and not (self.keep and not force):
            self._disk.remove()
            self._disk = None
        super().close(force)
