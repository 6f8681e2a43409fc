"""``wedgewatch bench view``: what a page of ``wedgewatch view`` costs with many requests in flight,
and the view attached to ``bench proxy --view``.

The bench: a simulator that streams slowly (each request outlives the measurement), the proxy
alone with a ledger (``wedgewatch proxy --ledger``), the view over that ledger (finding the proxy by
its ``proxy_started`` row), a load generator keeping C streams open, and one page's live
connection read for the measured seconds (``view_reader.py``): bytes per second of events (mean,
and the largest one-second window), batches, the rows of requests in the last table sent (C, when
the page shows every stream), and the CPU the view's process and the proxy's used meanwhile.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from wedgewatch.bench.children import Server, pinned
from wedgewatch.bench.procfs import group_cpu_seconds
from wedgewatch.view.child import NICE

_SLOW = """
name = "bench-view"
[server]
tokens_per_s = {rate}
max_num_seqs = 4096
"""


_NICE = ["nice", "-n", str(NICE)]
ATTACHED = "proxy+view"
"""``bench proxy --view``'s name for the proxy measured with a page of the view attached."""
_KEYS = (
    ("tokens_per_s", "tok/s", 1.0, ".0f"),
    ("itl_p99", "ITL p99 ms", 1e3, ".2f"),
    ("cpu_us_per_token", "CPU us/tok", 1.0, ".1f"),
)


def _per_token(r: dict[str, Any]) -> float | None:
    return 1e6 * r["cpu"] / r["tokens_total"] if r.get("tokens_total") and "cpu" in r else None


def versus(proxy: list[dict[str, Any]], attached: list[dict[str, Any]]) -> dict[str, Any]:
    """The proxy with a page attached against the spread (min to max) of its own repeats without:
    each figure's median, the spread, and whether the median lies within it."""
    import statistics

    out: dict[str, Any] = {}
    for key, _, _, _ in _KEYS:
        own = [
            v
            for v in ((_per_token(r) if key == "cpu_us_per_token" else r[key]) for r in proxy)
            if v is not None
        ]
        with_view = [
            v
            for v in ((_per_token(r) if key == "cpu_us_per_token" else r[key]) for r in attached)
            if v is not None
        ]
        if not own or not with_view:
            continue
        median = statistics.median(with_view)
        out[key] = {
            "spread": [min(own), max(own)],
            "with_view": median,
            "within": min(own) <= median <= max(own),
        }
    pages = [r["page"] for r in attached if "page" in r]
    out["page_bytes_per_s"] = max((p["bytes_per_s"] for p in pages), default=None)
    cpu = [r["view_cpu_per_s"] for r in attached if "view_cpu_per_s" in r]
    out["view_cpu_per_s"] = statistics.median(cpu) if cpu else None
    return out


def attached_table(rows: list[dict[str, Any]]) -> list[str]:
    """``bench proxy --view``'s lines: per level, each figure with a page attached beside the
    spread of the proxy's repeats without one."""
    lines = [
        "With a page of wedgewatch view attached (median) against the proxy's own spread (min-max of its repeats):"
    ]
    for r in rows:
        v = r["view"]
        cells = []
        for key, label, scale, fmt in _KEYS:
            if key in v:
                lo, hi = (x * scale for x in v[key]["spread"])
                mark = "within" if v[key]["within"] else "OUTSIDE"
                cells.append(
                    f"{label} {format(v[key]['with_view'] * scale, fmt)} ({format(lo, fmt)}-{format(hi, fmt)}, {mark})"
                )
        page = v.get("page_bytes_per_s")
        cells.append("page " + ("-" if page is None else f"{page / 1e3:.1f} kB/s"))
        cpu = v.get("view_cpu_per_s")
        cells.append("view CPU " + ("-" if cpu is None else f"{cpu * 100:.0f}% of a core"))
        lines.append(f"  {r['streams']:>4} streams: " + "; ".join(cells))
    return lines


def _wedgewatch(*args: str) -> list[str]:
    return [sys.executable, "-m", "wedgewatch", *args]


class Attached:
    """A view over ``ledger`` in its own process; ``read(page, seconds)`` starts one page's live
    connection, read by a process of its own, and ``result()`` waits for its figures."""

    def __init__(self, ledger: Path, work: Path, cpus: set[int] | None = None) -> None:
        self.cpus = cpus
        # At the priority ``--view`` gives it (view/child.py); the reader, standing for a browser
        # on this machine, likewise.
        self.server = Server(
            [*_NICE, *_wedgewatch("view", str(ledger), "--port", "0")],
            work / "view.log",
            cpus=cpus,
            prefix="view on ",
        )
        self.url = self.server.url.rstrip("/")
        self._reader: subprocess.Popen[str] | None = None

    def read(self, page: str, seconds: float) -> None:
        argv = [
            *_NICE,
            sys.executable,
            "-m",
            "wedgewatch.bench.view_reader",
            "--url",
            f"{self.url}/stream{page}",
        ]
        self._reader = subprocess.Popen(
            [*argv, "--seconds", str(seconds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=pinned(self.cpus),
        )

    def result(self) -> dict[str, Any]:
        assert self._reader is not None
        out, err = self._reader.communicate(timeout=600)
        self._reader = None
        if not out.strip():
            raise RuntimeError(f"the view's reader failed: {err[-500:]}")
        found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return found

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.kill()
            self._reader.wait()
        self.server.stop()


def run(streams: int = 256, seconds: float = 20.0, warmup: float = 5.0, rate: float = 20.0) -> dict[str, Any]:
    """The figures of one measurement (``bench view``)."""
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="wedgewatch-bench-view-") as tmp:
        work = Path(tmp)
        (work / "slow.toml").write_text(_SLOW.format(rate=rate))
        max_tokens = int(rate * (warmup + seconds + 60))  # every request outlives the measurement
        sim = Server(
            _wedgewatch("sim", "--port", "0", "--scenario", str(work / "slow.toml")), work / "sim.log"
        )
        proxy = view = None
        try:
            ledger = work / "ledger.sqlite"
            proxy = Server(
                _wedgewatch("proxy", "--upstream", sim.url, "--port", "0", "--ledger", str(ledger)),
                work / "proxy.log",
            )
            view = Attached(ledger, work)
            load = subprocess.Popen(
                [sys.executable, "-m", "wedgewatch.bench.streams", "--url", f"{proxy.url}/a/bench-view",
                 "--concurrency", str(streams), "--duration", str(seconds), "--warmup", str(warmup),
                 "--max-tokens", str(max_tokens)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            time.sleep(warmup)  # the streams open; the page's connection starts with them in flight
            cpu0 = group_cpu_seconds(view.server.pid), group_cpu_seconds(proxy.pid)
            view.read("/serve", seconds)
            page = view.result()
            cpu1 = group_cpu_seconds(view.server.pid), group_cpu_seconds(proxy.pid)
            load.communicate(timeout=seconds + warmup + 300)
        finally:
            if view is not None:
                view.stop()
            if proxy is not None:
                proxy.stop()
            sim.stop()
    return {
        "command": f"wedgewatch bench view --streams {streams} --seconds {seconds:g}",
        "streams": streams,
        "page": page,
        "view_cpu_per_s": (cpu1[0] - cpu0[0]) / seconds,
        "proxy_cpu_per_s": (cpu1[1] - cpu0[1]) / seconds,
        "seconds": time.time() - started,
    }


def render(r: dict[str, Any]) -> str:
    p = r["page"]
    return "\n".join(
        [
            f"wedgewatch view with {r['streams']} streams in flight, one page's live connection read for "
            f"{p['seconds']:g} s:",
            f"  events: {p['bytes_per_s'] / 1e3:,.1f} kB/s on average, {p['max_bytes_in_a_second'] / 1e3:,.1f} kB "
            f"in the busiest second; {p['batches']} batches",
            f"  requests in the last table sent: {p['rows_in_last_table']} (of {r['streams']} in flight)",
            f"  CPU: the view {r['view_cpu_per_s'] * 100:.1f}% of a core, the proxy {r['proxy_cpu_per_s'] * 100:.1f}%",
        ]
    )
