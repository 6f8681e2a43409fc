"""CPU and memory of the processes under test, read from ``/proc`` (Linux only).

A target is a process group: the wedgewatch proxy is one process, nginx a master and its worker.
Summing over the group measures both the same way.
"""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int, key: str = "VmRSS") -> float:
    """A ``/proc/<pid>/status`` size in MiB (``VmRSS`` now, ``VmHWM`` at its peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def group_pids(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (field 5 of ``/proc/<pid>/stat``; field 3 is
    the state, and a zombie waiting for its parent to reap it is not live)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited while we looked
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):  # a zombie holds no CPU or memory
            pids.append(int(entry.name))
    return sorted(pids)


def group_cpu_seconds(pgid: int) -> float:
    """CPU of every live process in the group (a worker that exits takes its share with it)."""
    total = 0.0
    for pid in group_pids(pgid):
        try:
            total += cpu_seconds(pid)
        except OSError:
            pass
    return total


def group_rss_mib(pgid: int, key: str = "VmRSS") -> float:
    """The group's resident memory, summed over its processes (a page they share counts in each)."""
    total = 0.0
    for pid in group_pids(pgid):
        try:
            total += rss_mib(pid, key)
        except OSError:
            pass
    return total


def group_pss_gb(pgid: int) -> float:
    """The group's proportional set size in GB (``/proc/<pid>/smaps_rollup``): a page its processes
    share is divided among them, so the sum is the memory the group holds."""
    total = 0
    for pid in group_pids(pgid):
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            pass
    return total / 1e9
