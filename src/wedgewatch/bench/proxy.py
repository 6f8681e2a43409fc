"""``wedgewatch bench proxy``: the watchdog proxy against going direct, in one run and one process
tree, and how fast it sees each kind of stall.

Throughput: a healthy simulator (256 one-token chunks per request at 200 tokens/s per stream, role
chunk first, usage chunk, ``[DONE]``), the proxy in its own process with its shipped deadlines and
a ledger, and a load generator in a third process (``bench/streams.py``) that keeps C streams open.
Direct and proxied runs alternate, level by level, for each repeat; the table shows medians over
the repeats. Proxy CPU comes from ``/proc/<pid>/stat`` around each proxied run, divided by the
tokens the load generator received in that run.

Detection: a second simulator that stalls on cue, a second proxy with short windows, and the OpenAI
SDK (default retries) as client; for each stall kind, the seconds from the point the window starts
(the request, the last token, or the first token for a trickle) to the SDK's error, over the window.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wedgewatch.errors import BadInput

_HEALTHY = """
name = "bench-proxy"
[server]
tokens_per_s = {rate}
max_num_seqs = 4096
"""

_FAULTS = """
name = "bench-proxy-faults"
[server]
tokens_per_s = 50.0
max_num_seqs = 256

[[fault]]
when.contains = "STALL-TTFT"
action = "stall_ttft"

[[fault]]
when.contains = "STALL-MID"
action = "stall_after"
after_tokens = 5

[[fault]]
when.contains = "TRICKLE"
action = "trickle"
rate = 1.0
"""

# kind -> (prompt, the WatchdogConfig field whose window runs out, where that window starts)
DETECTION = {
    "stall_ttft": ("STALL-TTFT", "ttft_timeout", "request"),
    "stall_midstream": ("STALL-MID", "stall_timeout", "last token"),
    "trickle": ("TRICKLE", "rate_window", "first token"),
    "total_timeout": ("a long healthy answer", "total_timeout", "request"),
}
DETECTION_WINDOWS = {"ttft_timeout": 2.0, "stall_timeout": 2.0, "min_rate": 2.0, "rate_window": 3.0}
DETECTION_TOTAL = 4.0


@dataclass
class BenchOptions:
    levels: list[int] = field(default_factory=lambda: [1, 16, 64, 256])
    repeats: int = 3
    duration: float = 3.0
    warmup: float = 1.0
    max_tokens: int = 256
    tokens_per_s: float = 200.0
    detection: bool = True
    detection_repeats: int = 3
    pin: bool = True
    """Throughput only: the proxy on a CPU of its own, the simulator and the load generator on the
    others, as the peers in PEERS.md were measured. Ignored on a one-CPU machine."""


def layout(opts: BenchOptions) -> tuple[set[int] | None, set[int] | None]:
    """(CPUs for the simulator and load generator, CPUs for the proxy), or (None, None)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not opts.pin or len(cpus) < 2:
        return None, None
    return set(cpus[:-1]), {cpus[-1]}


def _on(cpus: set[int] | None) -> Any:
    """A preexec_fn that keeps the child (and what it starts) on ``cpus``."""
    return None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))


class _Proc:
    """A child server in its own process group that printed ``listening on URL`` first."""

    def __init__(
        self, argv: list[str], log_path: Path, timeout: float = 60.0, cpus: set[int] | None = None
    ) -> None:
        self.log = log_path.open("w")
        self.p = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
            preexec_fn=_on(cpus),
        )
        assert self.p.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.p.stdout, selectors.EVENT_READ)
        line = self.p.stdout.readline().strip() if sel.select(timeout) else ""
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"{argv[3:5]} did not start: {line!r}; see {log_path}")
        self.url = line.removeprefix("listening on ")

    @property
    def pid(self) -> int:
        return self.p.pid

    def stop(self) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
                self.p.wait(5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.p.wait(5)
        self.log.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int, key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        body: bytes = r.read()
        return body.decode()


def _wedgewatch(*args: str) -> list[str]:
    return [sys.executable, "-m", "wedgewatch", *args]


def _loadgen(url: str, concurrency: int, opts: BenchOptions, cpus: set[int] | None = None) -> dict[str, Any]:
    argv = [sys.executable, "-m", "wedgewatch.bench.streams", "--url", url, "--concurrency", str(concurrency)]
    argv += [
        "--duration",
        str(opts.duration),
        "--warmup",
        str(opts.warmup),
        "--max-tokens",
        str(opts.max_tokens),
    ]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=opts.duration + opts.warmup + 120,
        preexec_fn=_on(cpus),
    )
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed: {done.stderr[-500:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def throughput(opts: BenchOptions, work: Path) -> dict[str, Any]:
    scenario = work / "healthy.toml"
    scenario.write_text(_HEALTHY.format(rate=opts.tokens_per_s))
    load_cpus, proxy_cpus = layout(opts)
    sim = _Proc(
        _wedgewatch("sim", "--port", "0", "--scenario", str(scenario)), work / "sim.log", cpus=load_cpus
    )
    proxy = None
    try:
        proxy = _Proc(
            _wedgewatch(
                "proxy", "--upstream", sim.url, "--port", "0", "--ledger", str(work / "ledger.sqlite")
            ),
            work / "proxy.log",
            cpus=proxy_cpus,
        )
        runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
        for rep in range(opts.repeats):
            for c in opts.levels:
                order = ["direct", "proxy"] if rep % 2 == 0 else ["proxy", "direct"]
                for target in order:
                    base = sim.url if target == "direct" else f"{proxy.url}/a/bench-{c}"
                    cpu0 = cpu_seconds(proxy.pid)
                    res = _loadgen(base + "/v1/chat/completions", c, opts, load_cpus)
                    res["proxy_cpu"] = cpu_seconds(proxy.pid) - cpu0
                    res["proxy_rss_mib"] = rss_mib(proxy.pid)
                    runs.setdefault((c, target), []).append(res)
        prom = _get(proxy.url + "/wedgewatch/metrics")
        peak = rss_mib(proxy.pid, "VmHWM")
    finally:
        if proxy is not None:
            proxy.stop()
        sim.stop()
    from wedgewatch.promtext import parse

    samples = parse(prom)
    rows = [_row(c, runs[(c, "direct")], runs[(c, "proxy")]) for c in opts.levels]
    return {
        "rows": rows,
        "cpu_layout": None
        if proxy_cpus is None
        else {"proxy": sorted(proxy_cpus), "simulator_and_load": sorted(load_cpus or ())},
        "false_stalls": int(samples.total("wedgewatch_proxy_stalls_total") or 0),
        "proxy_requests": {
            s.labels["outcome"]: int(s.value) for s in samples.series("wedgewatch_proxy_requests_total")
        },
        "proxy_peak_rss_mib": peak,
    }


def _row(c: int, direct: list[dict[str, Any]], proxied: list[dict[str, Any]]) -> dict[str, Any]:
    def med(runs: list[dict[str, Any]], key: str) -> float | None:
        return _median([r[key] for r in runs])

    row: dict[str, Any] = {"streams": c}
    for name, runs in (("direct", direct), ("proxy", proxied)):
        for key in ("tokens_per_s", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99"):
            row[f"{name}_{key}"] = med(runs, key)
        row[f"{name}_errors"] = sum(r["errors"] for r in runs)
    d, p = row["direct_tokens_per_s"], row["proxy_tokens_per_s"]
    row["ratio"] = p / d if d else None
    for key in ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99"):
        a, b = row[f"direct_{key}"], row[f"proxy_{key}"]
        row[f"added_{key}"] = None if a is None or b is None else b - a
    per_token = [r["proxy_cpu"] / r["tokens_total"] for r in proxied if r["tokens_total"]]
    row["proxy_cpu_us_per_token"] = 1e6 * statistics.median(per_token) if per_token else None
    row["proxy_rss_mib"] = max(r["proxy_rss_mib"] for r in proxied)
    row["error_samples"] = [s for r in direct + proxied for s in r["error_samples"]][:3]
    return row


async def _detect_one(client: Any, kind: str, prompt: str) -> dict[str, Any]:
    import openai

    t0 = time.monotonic()
    times: list[float] = []
    error: str | None = None
    try:
        stream = await client.chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": prompt}], max_tokens=4000, stream=True
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                times.append(time.monotonic())
    except openai.APIError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        error = str(body.get("code", type(exc).__name__))
    return {"kind": kind, "t0": t0, "times": times, "raised": time.monotonic(), "error": error}


def detection(opts: BenchOptions, work: Path) -> dict[str, Any]:
    scenario = work / "faults.toml"
    scenario.write_text(_FAULTS)
    windows = {**DETECTION_WINDOWS, "total_timeout": DETECTION_TOTAL}
    sim = _Proc(
        _wedgewatch("sim", "--port", "0", "--scenario", str(scenario), "--sse-ping-interval", "0.5"),
        work / "fsim.log",
    )
    proxy = None
    try:
        flags = [
            "--ttft-timeout",
            str(windows["ttft_timeout"]),
            "--stall-timeout",
            str(windows["stall_timeout"]),
        ]
        flags += ["--min-rate", str(windows["min_rate"]), "--rate-window", str(windows["rate_window"])]
        flags += ["--total-timeout", str(windows["total_timeout"]), "--records", str(work / "detect.jsonl")]
        proxy = _Proc(_wedgewatch("proxy", "--upstream", sim.url, "--port", "0", *flags), work / "fproxy.log")
        base = proxy.url + "/a/bench-detect/v1"

        async def all_kinds() -> list[dict[str, Any]]:
            import openai

            async with openai.AsyncOpenAI(base_url=base, api_key="bench") as client:  # max_retries=2
                # The SDK imports its resources lazily on first use: pay that before any clock runs.
                await client.chat.completions.create(
                    model="sim-model", messages=[{"role": "user", "content": "warm up"}], max_tokens=1
                )
                jobs = [
                    _detect_one(client, kind, prompt)
                    for kind, (prompt, _, _) in DETECTION.items()
                    for _ in range(opts.detection_repeats)
                ]
                return await asyncio.gather(*jobs)

        results = asyncio.run(all_kinds())
        stats = json.loads(_get(sim.url + "/sim/stats"))
    finally:
        if proxy is not None:
            proxy.stop()
        sim.stop()
    rows = []
    for kind, (_, window_field, start) in DETECTION.items():
        window = windows[window_field]
        ratios, wrong = [], 0
        for r in (x for x in results if x["kind"] == kind):
            if r["error"] != kind:
                wrong += 1
                continue
            ref = {"request": r["t0"], "last token": (r["times"] or [r["t0"]])[-1]}.get(start)
            ref = ref if ref is not None else (r["times"] or [r["t0"]])[0]
            ratios.append((r["raised"] - ref) / window)
        rows.append(
            {
                "kind": kind,
                "window": window,
                "from": start,
                "ratio_median": statistics.median(ratios) if ratios else None,
                "ratio_max": max(ratios) if ratios else None,
                "excess_max_s": (max(ratios) - 1) * window if ratios else None,
                "requests": opts.detection_repeats,
                "wrong_outcome": wrong,
            }
        )
    sent = len(results) + 1  # and the warm-up request
    return {"rows": rows, "sent": sent, "sim_received": stats["received"], "sim_aborted": stats["aborted"]}


def run(opts: BenchOptions) -> dict[str, Any]:
    if any(c < 1 for c in opts.levels) or not opts.levels:
        raise BadInput("--levels: give stream counts >= 1, for example 1,16,64,256")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="wedgewatch-bench-proxy-") as tmp:
        work = Path(tmp)
        out: dict[str, Any] = {
            "command": "wedgewatch bench proxy",
            "options": opts.__dict__,
            "cpus": os.cpu_count(),
            "load_before": os.getloadavg(),
        }
        out["throughput"] = throughput(opts, work)
        if opts.detection:
            out["detection"] = detection(opts, work)
        out["load_after"] = os.getloadavg()
    out["seconds"] = time.time() - started
    return out
