"""``wedgewatch run`` as the chaos bench drives it: a process group of its own (so a SIGKILL takes
it whole, as an operator's ``kill -9`` or an OOM kill of the session would), started again with
``run --resume`` after every death, its memory and open files read from ``/proc``. The run is sent
SIGTERM (and stops its servers) when the bench itself dies: in a session of its own it would
otherwise run on, an engine and all, after a bench killed from outside.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wedgewatch.bench import procfs


@dataclass(frozen=True)
class Sample:
    """The runner's memory and open files at a moment (the proxy lives in it)."""

    ts: float
    pid: int
    rss_mib: float
    fds: int
    label: str


@dataclass
class Death:
    """The runner ended without finishing (not by the bench's own SIGKILL)."""

    ts: float
    code: int | None
    tail: str


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the thread that started it ends (the bench's loop)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class RunProcess:
    """One run, through every ``wedgewatch run`` process it takes."""

    def __init__(self, config: Path, run_id: str, root: Path, env: dict[str, str] | None = None) -> None:
        self.config, self.run_id, self.root = config, run_id, root
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.deaths: list[Death] = []
        self.samples: list[Sample] = []
        self.summary: dict[str, Any] = {}

    def start(self) -> None:
        """The run's first process, or the next one (``--resume``) after a death."""
        args = [sys.executable, "-m", "wedgewatch", "run", str(self.config), "--json"]
        args += ["--run-id", self.run_id] if self.starts == 0 else ["--resume", self.run_id]
        self.starts += 1
        out = (self.root / f"runner-{self.starts}.out").open("wb")
        err = (self.root / f"runner-{self.starts}.err").open("wb")
        with out, err:
            self.proc = subprocess.Popen(
                args,
                stdout=out,
                stderr=err,
                env=self.env,
                start_new_session=True,
                cwd=self.root,
                preexec_fn=_die_with_parent,
            )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def exited(self) -> int | None:
        """The exit code once the current process has ended, else None."""
        return None if self.proc is None else self.proc.poll()

    def finished(self) -> bool:
        """The run's process ended with exit 0 and printed a summary of a finished run."""
        if self.exited() != 0:
            return False
        try:
            self.summary = json.loads((self.root / f"runner-{self.starts}.out").read_text())
        except (OSError, ValueError):
            return False
        return True

    def err_text(self) -> str:
        """The current process's stderr so far."""
        try:
            return (self.root / f"runner-{self.starts}.err").read_text(errors="replace")
        except OSError:
            return ""

    def note_death(self) -> None:
        code = self.exited()
        self.deaths.append(Death(time.time(), code, self.err_text()[-2000:]))

    def kill(self) -> None:
        """SIGKILL the process group; wait for its leader."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def sample(self, label: str) -> Sample | None:
        pid = self.pid
        if pid is None:
            return None
        try:
            s = Sample(time.time(), pid, procfs.rss_mib(pid), len(os.listdir(f"/proc/{pid}/fd")), label)
        except OSError:
            return None
        self.samples.append(s)
        return s
