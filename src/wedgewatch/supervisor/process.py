"""Server processes: ones we launch (own process group, one log file), ones we adopt, and ones
we only reach through a restart hook. All three fit ``protocols.ServerProcess``.

Methods block (a stop waits up to its grace period); the supervisor calls them in a thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from wedgewatch.base.errors import ServerStartError
from wedgewatch.base.redact import Scrubber
from wedgewatch.sandbox import reaper
from wedgewatch.supervisor.logpump import EXIT_DRAIN, PUMP_JOIN, spawn_logged

log = logging.getLogger(__name__)

UNKNOWN_EXIT = -255
"""What ``poll`` reports for a process that is gone but was not our child (exit code unknown)."""

_BIND_FAILURE = re.compile(
    r"address already in use|errno 98|eaddrinuse|couldn'?t bind|could not bind|failed to bind|"
    r"port \d+ (is )?(already )?in use",
    re.IGNORECASE,
)


def free_port(host: str) -> int:
    """A port nobody listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def port_busy(host: str, port: int) -> bool:
    """True when something holds ``port``. SO_REUSEADDR, as servers set it, so that sockets
    in TIME_WAIT from our own earlier connections do not count as busy."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def bind_failed(log_text: str) -> bool:
    """Whether a server's log says it could not bind its port."""
    return bool(_BIND_FAILURE.search(log_text))


def listener_pid(port: int) -> int | None:
    """The pid that listens on ``port`` (Linux /proc), if it is visible to us."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(proc.name)
        except OSError:
            continue
    return None


def _zombie(pid: int) -> bool:
    """A dead process its parent has not reaped yet (not ours to reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_group_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


class LocalServer:
    """A server we launch: its own session and process group, stdout and stderr to one file,
    through a ``Scrubber`` that masks ``secrets`` (the values of its key flags and secret env)."""

    def __init__(
        self,
        argv: list[str],
        base_url: str,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        secrets: list[str] | None = None,
    ) -> None:
        self.argv = argv
        self._base_url = base_url
        self.log_path = log_path
        self._env = env
        self._scrubber = Scrubber(secrets or ())
        self._proc: subprocess.Popen[bytes] | None = None
        self._pump: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        env = {**os.environ, **self._env} if self._env else None
        self._proc, self._pump = spawn_logged(self.argv, self.log_path, self._scrubber, env)
        # Killed at once by this process's watcher if this process dies without stopping it.
        reaper.shared().listed(self._proc.pid)

    def poll(self) -> int | None:
        code = self._proc.poll() if self._proc else None
        if code is not None and self._pump is not None and self._pump.is_alive():
            # Its last lines reach the log before anyone reads why it exited (a bind failure is
            # told by its log): the pump ends as soon as the pipe does, which the exit closes.
            self._pump.join(EXIT_DRAIN)
        return code

    def stop(self, grace: float) -> int | None:
        """SIGTERM the group, wait ``grace``, SIGKILL the group; return the leader's exit code.
        Children that outlive the leader are killed too: the group is empty when this returns."""
        proc = self._proc
        if proc is None:
            return None
        pgid = proc.pid  # start_new_session: the leader's pid is the group id
        if proc.poll() is None:
            _kill_group(pgid, signal.SIGTERM)
            # A stopped process (a SIGSTOPped engine: the wedge we were called for) keeps SIGTERM
            # pending until it runs again; SIGCONT lets it act on the SIGTERM now.
            _kill_group(pgid, signal.SIGCONT)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                log.warning("server pid %d ignored SIGTERM for %.1fs; SIGKILL", pgid, grace)
        if group_alive(pgid):
            _kill_group(pgid, signal.SIGKILL)
        code = proc.wait()
        if not _wait_group_gone(pgid, 5.0):
            log.error("process group %d still has members after SIGKILL", pgid)
        reaper.shared().released(pgid)
        if self._pump is not None:
            self._pump.join(PUMP_JOIN)  # its last lines are in the log before the life's end row
        return code


class AdoptedServer:
    """A server that was already running when we came (``fresh = false``). We may stop it to
    restart, if /proc shows who listens on its port; we never started it."""

    def __init__(self, base_url: str, pid: int | None) -> None:
        self._base_url = base_url
        self._pid = pid

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def pid(self) -> int | None:
        return self._pid

    def start(self) -> None:
        raise RuntimeError("an adopted server is already running")

    def poll(self) -> int | None:
        if self._pid is None:
            return None
        try:
            os.kill(self._pid, 0)
        except ProcessLookupError:
            return UNKNOWN_EXIT
        except PermissionError:
            return None
        return UNKNOWN_EXIT if _zombie(self._pid) else None

    def stop(self, grace: float) -> int | None:
        if self._pid is None or self.poll() is not None:
            return None
        try:
            pgid = os.getpgid(self._pid)
        except ProcessLookupError:
            return None
        # Never signal our own group: that would take wedgewatch down with the server.
        own = pgid == os.getpgrp()
        pid = self._pid

        def send(sig: int) -> None:
            if own:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            else:
                _kill_group(pgid, sig)

        send(signal.SIGTERM)
        send(signal.SIGCONT)  # a stopped server acts on the SIGTERM only once continued
        deadline = time.monotonic() + grace
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        send(signal.SIGKILL)
        return None


class HookServer:
    """A server we do not own (``external``): ``start`` restarts it with the restart hook (an
    argv), or by POSTing to ``restart_url`` (a ``wedgewatch serve`` on another host, which
    answers once its new life is ready), if either is given."""

    def __init__(
        self,
        base_url: str,
        hook: list[str],
        log_path: Path,
        timeout: float,
        restart_url: str | None = None,
        token_env: str = "",
        secrets: list[str] | None = None,
    ) -> None:
        self._base_url = base_url
        self.secrets = secrets or []  # masked in the hook's log (a token on its command line)
        self.hook = hook
        self.log_path = log_path
        self.timeout = timeout
        self.restart_url = restart_url
        self.token_env = token_env

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def pid(self) -> int | None:
        return None

    def start(self) -> None:
        if self.restart_url:
            self._post_restart(self.restart_url)
            return
        if not self.hook:
            return
        try:
            proc, pump = spawn_logged(self.hook, self.log_path, Scrubber(self.secrets))
            try:
                proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
            finally:
                pump.join(PUMP_JOIN)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ServerStartError(f"restart hook {self.hook[0]!r} failed: {exc}") from None
        if proc.returncode != 0:
            raise ServerStartError(f"restart hook exited with code {proc.returncode}; see {self.log_path}")

    def _post_restart(self, url: str) -> None:
        token = os.environ.get(self.token_env, "")
        if not token:
            raise ServerStartError(
                f"server.restart_url: the bearer token is not set (environment variable {self.token_env})"
            )
        request = urllib.request.Request(
            url,
            data=b"{}",
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()[:300].decode(errors="replace")
            raise ServerStartError(f"restart at {url} answered HTTP {exc.code}: {body}") from None
        except (OSError, ValueError) as exc:
            raise ServerStartError(f"restart at {url} failed: {exc}") from None

    def poll(self) -> int | None:
        return None

    def stop(self, grace: float) -> int | None:
        return None
