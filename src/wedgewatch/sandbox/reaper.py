"""A watcher process that kills an attempt's command process groups when the process that started
them dies, however it dies.

The local executor needs none: a stopped run closes its list of groups (``groups.close``) itself.
A Ray worker cannot promise that: Ray ends a worker with SIGKILL (a forced cancel, a shutdown, the
memory monitor) and a node's raylet may die under it, and commands run in sessions of their own,
so neither the worker's death nor Ray's cleanup of its process group reaches them. So each attempt
on Ray starts one of these beside it: the worker writes ``+PGID`` when a group is listed and
``-PGID`` when it is released; when the pipe closes (the attempt ended, or its worker died: the
kernel closes the pipe either way) the watcher SIGKILLs every group still listed, and exits.

Run as a file (``python -I -S reaper.py``), not as ``-m wedgewatch...``: the watcher must start in
milliseconds and import nothing but the standard library. It ignores SIGINT, runs in a session of
its own and leaves its parent at once (it forks and the first process exits), so neither a Ctrl-C
at a terminal, nor Ray killing the worker's process group, nor Ray killing a dying worker's
children (it does: ``kill_child_processes_on_worker_exit``) takes it down before its job is done.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading


def _watch(stream: object) -> None:
    live: set[int] = set()
    for raw in stream:  # type: ignore[attr-defined]
        line = raw.strip()
        if line[:1] == b"+":
            live.add(int(line[1:]))
        elif line[:1] == b"-":
            live.discard(int(line[1:]))
    for pgid in live:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Reaper:
    """The owner's side: one watcher process for one attempt's groups (``groups.Groups(watcher=)``).

    ``listed``/``released`` are called with the list's lock held, right after the command's
    ``Popen`` returns: a group is told to the watcher before the command can be waited on, so the
    only unwatched moment is the fork itself (the worker SIGKILLed within those microseconds would
    leave that one command running)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        # The first process forks the watcher and exits: reap it, the watcher is nobody's child.
        self._proc.wait()
        assert self._proc.stdin is not None
        self._pipe = self._proc.stdin

    def _say(self, line: str) -> None:
        with self._lock:
            try:
                self._pipe.write(line.encode() + b"\n")
                self._pipe.flush()
            except (BrokenPipeError, ValueError):
                pass  # the watcher is gone (or stopped): nothing left to tell

    def listed(self, pgid: int) -> None:
        self._say(f"+{pgid}")

    def released(self, pgid: int) -> None:
        self._say(f"-{pgid}")

    def stop(self) -> None:
        """Close the pipe: the watcher kills whatever is still listed and exits."""
        with self._lock:
            try:
                self._pipe.close()
            except BrokenPipeError:
                pass


_SHARED: list[Reaper] = []
_SHARED_LOCK = threading.Lock()


def shared() -> Reaper:
    """This process's own watcher, for the groups it starts that must not outlive it: the
    servers a supervisor launches, the harness ``wrap`` runs. If the process dies without
    stopping them (a SIGKILL, an OOM kill), the watcher kills them at once. Made on first use."""
    with _SHARED_LOCK:
        if not _SHARED:
            _SHARED.append(Reaper())
        return _SHARED[0]


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.fork() > 0:
        os._exit(0)
    _watch(sys.stdin.buffer)
