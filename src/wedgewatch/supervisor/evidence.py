"""What a wedged server looked like, kept before the restart kills it: what a bug report needs.

For every process of the server's group, a ``py-spy dump --nonblocking`` (its Python stacks: a
SIGSTOPped vLLM EngineCore shows ``EngineCore.step`` waiting on its worker's message queue); the
server's ``/metrics`` as it answers now (a frozen engine's gauges, or why it did not answer); and
the tail of the life's log. The files go in ``<life_id>.wedge/`` beside the life's log, and the
``wedge`` event names them.

``--nonblocking`` because a plain dump first suspends the process, which fails on one that is
already stopped ("Failed to suspend process"); reading a stopped one's memory works. vLLM's own
watchdog proposal dumps stacks only after 300 s; this takes a fraction of a second, and every
part is bounded so a capture can never hold the restart up for long.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import aiohttp

from wedgewatch.base import redact
from wedgewatch.base.files import private_dir, write_private
from wedgewatch.supervisor.process import log_tail

log = logging.getLogger(__name__)

PYSPY_TIMEOUT = 10.0
"""Seconds for one process's dump (a stopped process reads in hundredths of a second; a busy one
with many threads in under a few)."""
METRICS_TIMEOUT = 2.0
LOG_LINES = 200


def evidence_dir(log_path: Path, life_id: str) -> Path:
    """Where a life's wedge evidence goes: beside its log."""
    return log_path.parent / f"{life_id}.wedge"


def group_pids(pgid: int) -> list[int]:
    """Every process whose process group is ``pgid`` (Linux /proc), the leader first."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        # After the command: state, ppid, pgrp.
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return sorted(found, key=lambda pid: (pid != pgid, pid))


def pyspy_program() -> str | None:
    """py-spy on PATH, else beside this Python (a venv's bin/ is not always on PATH)."""
    beside = Path(sys.executable).with_name("py-spy")
    return shutil.which("py-spy") or (str(beside) if beside.is_file() else None)


async def _pyspy(program: str, pid: int, out: Path) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        program,
        "dump",
        "--nonblocking",
        "--pid",
        str(pid),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        text, _ = await asyncio.wait_for(proc.communicate(), PYSPY_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return {"pid": pid, "ok": False, "error": f"py-spy took over {PYSPY_TIMEOUT:g}s"}
    write_private(out, text)
    return {"pid": pid, "ok": proc.returncode == 0, "file": out.name, "state": _state(pid)}


def _state(pid: int) -> str | None:
    """The process's state letter (``T``: stopped), as it was during the capture."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return None


async def _metrics(
    session: aiohttp.ClientSession | None, base_url: str, headers: dict[str, str] | None, out: Path
) -> dict[str, Any]:
    if session is None:
        return {"ok": False, "error": "no HTTP session"}
    try:
        timeout = aiohttp.ClientTimeout(total=METRICS_TIMEOUT)
        async with session.get(base_url + "/metrics", headers=headers, timeout=timeout) as resp:
            body = await resp.read()
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return {"ok": False, "error": f"/metrics did not answer: {type(exc).__name__}"}
    write_private(out, body)
    return {"ok": resp.status == 200, "status": resp.status, "file": out.name}


async def capture(
    directory: Path,
    pgid: int | None,
    base_url: str,
    log_path: Path | None,
    session: aiohttp.ClientSession | None,
    headers: dict[str, str] | None,
) -> dict[str, Any]:
    """Write the evidence into ``directory``; return what was kept, for the ``wedge`` event.
    Never raises: a capture that fails says why, and the restart goes on."""
    try:
        private_dir(directory)  # the user's only, as every file wedgewatch writes
        tail = redact.text(log_tail(log_path, LOG_LINES)) if log_path else ""
        write_private(directory / "log-tail.txt", tail)
        program = pyspy_program()
        pids = group_pids(pgid) if pgid else []
        jobs = [_metrics(session, base_url, headers, directory / "metrics.txt")]
        if program:
            jobs += [_pyspy(program, pid, directory / f"py-spy-{pid}.txt") for pid in pids]
        results = await asyncio.gather(*jobs)
        stacks: list[dict[str, Any]] | str = list(results[1:]) if program else "py-spy not found"
        return {
            "dir": str(directory),
            "log_tail": "log-tail.txt",
            "metrics": results[0],
            "pids": pids,
            "py_spy": stacks,
        }
    except Exception as exc:  # evidence is a courtesy: it must never stop a restart
        log.exception("could not capture wedge evidence in %s", directory)
        return {"dir": str(directory), "error": f"{type(exc).__name__}: {exc}"}


def pgid_of(pid: int | None) -> int | None:
    """The process group of ``pid`` (the group we launched it in), if it is still there."""
    if pid is None:
        return None
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None
