"""A view started by ``serve``, ``run`` or ``wrap --view``: ``wedgewatch view`` in a process of its
own, off the proxy's event loop and its interpreter (the page's reads and rendering never take a
proxy's GIL). It reads the ledger the command writes, and ends when the command does: its stdin is
a pipe from the command, and the view stops at that pipe's end, which comes when the command
exits, however it exits (SIGKILL included)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from wedgewatch.base.errors import WedgewatchError

NICE = 10
"""The view's priority below the command's: a page is best effort, and on a busy machine the
proxy, the engine and the agents come first."""

STARTUP = 60.0
"""Seconds the command waits for the view's first line (its address)."""


def _lower() -> None:
    """In the child before it runs: NICE below the command (a no-op where that fails)."""
    try:
        os.nice(NICE)
    except OSError:
        pass


class ViewChild:
    """``ViewChild(ledger, run_id).start()`` returns the view's URL; ``stop()`` ends it."""

    def __init__(self, ledger: str, run_id: str | None = None, port: int = 0) -> None:
        self.argv = [
            sys.executable,
            "-m",
            "wedgewatch",
            "view",
            ledger,
            "--port",
            str(port),
            "--wait",
            "--until-stdin-closes",
        ]
        if run_id is not None:
            self.argv += ["--run", run_id]
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> str:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
            preexec_fn=_lower,
        )
        line: list[str] = []
        reader = threading.Thread(
            target=lambda: line.append(self.proc.stdout.readline() if self.proc and self.proc.stdout else ""),
            daemon=True,
        )
        reader.start()
        reader.join(STARTUP)
        first = line[0].strip() if line else ""
        if not first.startswith("view on "):
            self.stop()
            raise WedgewatchError(f"--view: the view did not start (it said {first or 'nothing'!r})")
        self.url = first.removeprefix("view on ")
        return self.url

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the view's cue to stop
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
