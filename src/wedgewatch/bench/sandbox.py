"""``wedgewatch bench sandbox``: what each sandbox backend costs and contains, measured on this host
with real processes (docs/sandboxes.md quotes it).

Per backend: the seconds to create and close a sandbox, the median seconds of a command that
does nothing, how late a timeout returns; then, for the isolating backends only (from `local`
they would be real), the escape attempts, each judged from the host:
a write outside the work tree, a connection to a port listening on the host's loopback, a kill
of a host process, a fork bomb (its peak process count, seen in the host's process table), a
file written past the size limit, /tmp filled past its size, many files written into the work tree
past the disk quota, and whether anything is left
running afterwards.
"""

from __future__ import annotations

import os
import secrets
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from wedgewatch.base.protocols import Sandbox
from wedgewatch.config import SandboxConfig
from wedgewatch.sandbox import get_sandbox
from wedgewatch.suites import load_bundled

BOMB_LIMIT = 64


def _host_pids(marker: str) -> int:
    n = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                n += state not in ("Z", "X")
        except OSError:
            continue
    return n


def _escapes(box: Sandbox, scratch: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    outside = scratch / f"outside-{secrets.token_hex(3)}"
    box.run(f"echo x > {outside}; echo x > /etc/wedgewatch-bench", timeout=30)
    out["wrote_outside"] = outside.exists() or Path("/etc/wedgewatch-bench").exists()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        box.run(f"echo hi > /dev/tcp/127.0.0.1/{port}", timeout=30)
        try:
            server.accept()[0].close()
            out["reached_host_loopback"] = True
        except TimeoutError:
            out["reached_host_loopback"] = False
    victim = subprocess.Popen(["sleep", "60"])
    box.run(f"kill -9 {victim.pid}", timeout=30)
    time.sleep(0.2)
    out["killed_host_process"] = victim.poll() is not None
    victim.kill()
    victim.wait()
    return out


def _bomb(box: Sandbox) -> dict[str, Any]:
    mark = f"wwbench{secrets.token_hex(4)}"
    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _host_pids(mark))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    t0 = time.monotonic()
    res = box.run(f": {mark}; bomb() {{ bomb | bomb & }}; bomb; sleep 3", timeout=6)
    took = time.monotonic() - t0
    done.set()
    watcher.join()
    time.sleep(0.5)
    return {
        "fork_bomb_peak_processes": peak,
        "fork_bomb_seconds": round(took, 2),
        "fork_bomb_left_running": _host_pids(mark),
        "usable_after_bomb": box.run("echo ok", timeout=30).output.strip() == "ok",
        "fork_bomb_timed_out": res.timed_out,
    }


def _disk(box: Sandbox) -> dict[str, Any]:
    big = box.run("dd if=/dev/zero of=big bs=1M count=16 2>/dev/null; stat -c %s big", timeout=60)
    tmp = box.run(
        "for i in $(seq 16); do dd if=/dev/zero of=/tmp/f$i bs=1M count=1 2>/dev/null; done; du -skx /tmp",
        timeout=60,
    )
    # Many files, each under the file-size limit, into the work tree: only the disk quota stops them.
    tree = box.run(
        "for i in $(seq 64); do head -c 1048576 /dev/zero > fill$i 2>/dev/null || break; done;"
        " cat fill* | wc -c; rm -f fill*",
        timeout=120,
    )
    return {
        "largest_file_bytes": int(big.output.split()[-1]),
        "tmp_filled_kib": int(tmp.output.split()[-2]),
        "work_tree_filled_bytes": int(tree.output.split()[-1]),
    }


def measure(kind: str, cfg: SandboxConfig, commands: int = 20) -> dict[str, Any]:
    """The figures of one backend (see the module docstring)."""
    instance = load_bundled()[0]
    backend = get_sandbox(kind)
    with tempfile.TemporaryDirectory(prefix="wedgewatch-bench-") as scratch:
        root = Path(scratch)
        t0 = time.perf_counter()
        box: Sandbox = backend.create(instance, root / "boxes", settings=cfg)
        created = time.perf_counter() - t0
        try:
            times = []
            for _ in range(commands):
                t = time.perf_counter()
                box.run("true", timeout=30)
                times.append(time.perf_counter() - t)
            t = time.perf_counter()
            box.run("sleep 30", timeout=1.0)
            late = time.perf_counter() - t - 1.0
            figures: dict[str, Any] = {
                "create_seconds": round(created, 3),
                "command_median_seconds": round(statistics.median(times), 4),
                "timeout_returns_late_seconds": round(late, 3),
            }
            # The local sandbox is no boundary: its "escapes" would be real writes, kills and a
            # real fork bomb on this host, so they are not attempted.
            if kind != "local":
                figures.update(_escapes(box, root))
                figures.update(_bomb(box))
                figures.update(_disk(box))
        finally:
            t = time.perf_counter()
            box.close()
            figures["close_seconds"] = round(time.perf_counter() - t, 3)
    return figures


def run(kinds: list[str], cli: str, container_args: list[str], image: str | None) -> dict[str, Any]:
    """Every backend in ``kinds``; the container one needs ``image`` (a testbed image is built
    with ``cli`` when it is None)."""
    limits = {"processes": BOMB_LIMIT, "file_size_mb": 4, "tmp_size_mb": 8, "disk_mb": 16}
    out: dict[str, Any] = {"host": {"uid": os.getuid(), "cpus": os.cpu_count()}, "limits": limits}
    for kind in kinds:
        extra: dict[str, Any] = {}
        if kind == "container":
            from wedgewatch.sandbox import testbed

            extra = {
                "container_cli": cli,
                "container_args": container_args,
                "image": image or testbed.build(load_bundled()[0], cli=cli),
            }
        out[kind] = measure(kind, SandboxConfig(kind=kind, **limits, **extra))
    return out
