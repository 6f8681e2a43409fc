"""A launched process's output on its way to its log: through a pipe, line by line through a
``Scrubber`` (base/redact.py) that masks the secrets it knows, into a file that is its user's only.
vLLM, for one, prints its arguments at start, ``--api-key`` included; nothing reaches the log
before it is scrubbed, and nothing is dropped.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path

from wedgewatch.base.files import PRIVATE_FILE, private_dir
from wedgewatch.base.redact import Scrubber

PUMP_READ = 65536
"""Bytes the log pump asks the pipe for at once: whatever is there comes back at once, so a
server that prints much is never held up by its log."""

PUMP_HOLD = 1 << 20
"""Bytes of one line without its end the pump holds before writing it anyway (a progress bar
that never ends its line)."""


def _pump(source: int, log_fd: int, scrubber: Scrubber) -> None:
    """Copy a server's output from its pipe to its log, line by line through ``scrubber``, until
    every writer has closed the pipe; then the rest. Whole lines only are scrubbed, so a secret
    split across two reads is still found; nothing is dropped."""
    held = b""
    try:
        while True:
            try:
                chunk = os.read(source, PUMP_READ)
            except OSError:
                chunk = b""
            if not chunk:
                break
            held += chunk
            end = max(held.rfind(b"\n"), held.rfind(b"\r")) + 1
            if end == 0 and len(held) < PUMP_HOLD:
                continue
            cut = end or len(held)
            os.write(log_fd, scrubber.line(held[:cut]))
            held = held[cut:]
        if held:
            os.write(log_fd, scrubber.line(held))
    finally:
        os.close(source)
        os.close(log_fd)


def open_log(path: Path) -> int:
    """A life's log file for appending, the user's only (its directory too)."""
    private_dir(path.parent)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)


def spawn_logged(
    argv: list[str], log_path: Path, scrubber: Scrubber, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], threading.Thread]:
    """``argv`` in its own session and process group, its stdout and stderr through a pipe and
    ``scrubber`` into ``log_path`` (vLLM, for one, prints its arguments, keys included, at start).
    Returns the process and the thread that pumps its output (it ends when the group is gone)."""
    log_fd = open_log(log_path)
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            start_new_session=True,
            env=env,
        )
    except BaseException:
        for fd in (read_fd, write_fd, log_fd):
            os.close(fd)
        raise
    os.close(write_fd)  # the children hold it now: the pipe ends when the last of them exits
    pump = threading.Thread(target=_pump, args=(read_fd, log_fd, scrubber), name="log-pump", daemon=True)
    pump.start()
    return proc, pump


EXIT_DRAIN = 1.0
"""Seconds ``poll`` waits, once the server has exited, for the pump to write its last lines: the
pipe closes with the last process holding it, so this is milliseconds, unless a grandchild that
left the group still holds it (the pump then goes on, a daemon, and the log is read as it is)."""

PUMP_JOIN = 5.0
"""Seconds a stop waits for the log pump to write the last lines of a group that is gone (a
grandchild that left the group may hold the pipe open for ever: the thread is a daemon)."""
