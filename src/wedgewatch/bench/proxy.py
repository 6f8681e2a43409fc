"""``wedgewatch bench proxy``: the watchdog proxy against going direct, in one run and one process
tree, and how fast it sees each kind of stall.

Throughput: a healthy simulator (256 one-token chunks per request at 200 tokens/s per stream, role
chunk first, usage chunk, ``[DONE]``), the proxy in its own process with its shipped deadlines and
a ledger, and a load generator in a third process (``bench/streams.py``) that keeps C streams open.
Direct and proxied runs alternate, level by level, for each repeat; the table shows medians over
the repeats. Proxy CPU comes from ``/proc/<pid>/stat`` around each proxied run, divided by the
tokens the load generator received in that run. ``--peers nginx`` puts nginx in front of the same
simulator (``bench/peers.py``) and measures it in the same rotation, on the proxy's CPU, the same way.

Detection: a second simulator that stalls on cue, a second proxy with short windows, and the OpenAI
SDK (default retries) as client; for each stall kind, the seconds from the point the window starts
(the request, the last token, or the first token for a trickle) to the SDK's error, over the window.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import BadInput
from wedgewatch.base.vocab import STALL_MIDSTREAM, STALL_TTFT, TOTAL_TIMEOUT, TRICKLE
from wedgewatch.bench import peers as peer_kinds
from wedgewatch.bench import view as view_bench
from wedgewatch.bench.children import Server, pinned
from wedgewatch.bench.procfs import group_cpu_seconds, group_rss_mib

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
    STALL_TTFT: ("STALL-TTFT", "ttft_timeout", "request"),
    STALL_MIDSTREAM: ("STALL-MID", "stall_timeout", "last token"),
    TRICKLE: ("TRICKLE", "rate_window", "first token"),
    TOTAL_TIMEOUT: ("a long healthy answer", "total_timeout", "request"),
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
    """Throughput only: the proxy (and each peer) on a CPU of its own, the simulator and the load
    generator on the others. Ignored on a one-CPU machine."""
    peers: list[str] = field(default_factory=list)
    """Other proxies measured in the same runs (``bench/peers.py``: ``nginx``); none by default."""
    view: bool = False
    """Also measure each level with a live page of ``wedgewatch view`` attached to the proxy's
    ledger (``bench/view.py``), in the same rotation; the table says whether each figure stays
    within the spread of the proxy's own repeats."""
    api: str = "chat"
    """The API the throughput runs stream: ``chat`` (chat completions), ``responses`` (the
    Responses API) or ``messages`` (Anthropic's Messages API). Stall detection is measured on
    chat either way: the deadlines are the same."""


def layout(opts: BenchOptions) -> tuple[set[int] | None, set[int] | None]:
    """(CPUs for the simulator and load generator, CPUs for the proxy), or (None, None)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not opts.pin or len(cpus) < 2:
        return None, None
    return set(cpus[:-1]), {cpus[-1]}


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
        "--api",
        opts.api,
    ]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=opts.duration + opts.warmup + 120,
        preexec_fn=pinned(cpus),
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
    sim = Server(
        _wedgewatch("sim", "--port", "0", "--scenario", str(scenario)), work / "sim.log", cpus=load_cpus
    )
    proxy = None
    attached: view_bench.Attached | None = None
    running: dict[str, peer_kinds.Peer] = {}
    try:
        proxy = Server(
            _wedgewatch(
                "proxy", "--upstream", sim.url, "--port", "0", "--ledger", str(work / "ledger.sqlite")
            ),
            work / "proxy.log",
            cpus=proxy_cpus,
        )
        for name in opts.peers:  # each on the proxy's CPU: one measured proxy at a time uses it
            running[name] = peer_kinds.start(name, sim.url, work, proxy_cpus)
        groups = {"proxy": proxy.pid} | {name: peer.pgid for name, peer in running.items()}
        if opts.view:  # the view off the proxy's CPU, as a browser's machine would have it
            attached = view_bench.Attached(work / "ledger.sqlite", work, load_cpus)
            groups[view_bench.ATTACHED] = proxy.pid
        runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
        for rep in range(opts.repeats):
            for c in opts.levels:
                order = ["direct", "proxy", *opts.peers, *([view_bench.ATTACHED] if attached else [])]
                for target in order if rep % 2 == 0 else order[::-1]:
                    urls = {"direct": sim.url, "proxy": f"{proxy.url}/a/bench-{c}"}
                    urls[view_bench.ATTACHED] = urls["proxy"]
                    base = urls.get(target) or running[target].url
                    pgid = groups.get(target)
                    cpu0 = group_cpu_seconds(pgid) if pgid else 0.0
                    view_cpu0 = 0.0
                    if attached is not None and target == view_bench.ATTACHED:
                        view_cpu0 = group_cpu_seconds(attached.server.pid)
                        attached.read("/serve", opts.warmup + opts.duration)
                    res = _loadgen(base, c, opts, load_cpus)
                    if attached is not None and target == view_bench.ATTACHED:
                        res["page"] = attached.result()
                        # The view's own CPU (on the load's CPUs), over the page's window.
                        window = opts.warmup + opts.duration
                        res["view_cpu_per_s"] = (group_cpu_seconds(attached.server.pid) - view_cpu0) / window
                    if pgid:
                        res["cpu"] = group_cpu_seconds(pgid) - cpu0
                        res["rss_mib"] = group_rss_mib(pgid)
                    runs.setdefault((c, target), []).append(res)
        prom = _get(proxy.url + "/wedgewatch/metrics")
        peak = group_rss_mib(proxy.pid, "VmHWM")
        peer_peaks = {name: group_rss_mib(pgid, "VmHWM") for name, pgid in groups.items() if name != "proxy"}
    finally:
        for peer in running.values():
            peer.stop()
        if attached is not None:
            attached.stop()
        if proxy is not None:
            proxy.stop()
        sim.stop()
    from wedgewatch.wire.promtext import parse

    samples = parse(prom)
    rows = [
        _row(c, runs[(c, "direct")], runs[(c, "proxy")], {n: runs[(c, n)] for n in opts.peers})
        for c in opts.levels
    ]
    if opts.view:
        for row, c in zip(rows, opts.levels, strict=True):
            row["view"] = view_bench.versus(runs[(c, "proxy")], runs[(c, view_bench.ATTACHED)])
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
        "peer_peak_rss_mib": peer_peaks,
    }


_KEYS = ("tokens_per_s", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99")


def _versus(direct: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One measured proxy's medians, and what it adds over the direct medians of the same repeats."""
    out: dict[str, Any] = {key: _median([r[key] for r in runs]) for key in _KEYS}
    out["errors"] = sum(r["errors"] for r in runs)
    d = direct["tokens_per_s"]
    out["ratio"] = out["tokens_per_s"] / d if d and out["tokens_per_s"] is not None else None
    for key in _KEYS[1:]:
        a, b = direct[key], out[key]
        out[f"added_{key}"] = None if a is None or b is None else b - a
    per_token = [r["cpu"] / r["tokens_total"] for r in runs if r["tokens_total"]]
    out["cpu_us_per_token"] = 1e6 * statistics.median(per_token) if per_token else None
    out["rss_mib"] = max(r["rss_mib"] for r in runs)
    return out


def _row(
    c: int,
    direct: list[dict[str, Any]],
    proxied: list[dict[str, Any]],
    peers: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    d: dict[str, Any] = {key: _median([r[key] for r in direct]) for key in _KEYS}
    row: dict[str, Any] = {"streams": c, **{f"direct_{k}": v for k, v in d.items()}}
    row["direct_errors"] = sum(r["errors"] for r in direct)
    p = _versus(d, proxied)
    row |= {f"proxy_{k}": p[k] for k in (*_KEYS, "errors")}
    row |= {k: p[k] for k in p if k.startswith("added_")}
    row |= {
        "ratio": p["ratio"],
        "proxy_cpu_us_per_token": p["cpu_us_per_token"],
        "proxy_rss_mib": p["rss_mib"],
    }
    row["peers"] = {name: _versus(d, runs) for name, runs in peers.items()}
    every = direct + proxied + [r for runs in peers.values() for r in runs]
    row["error_samples"] = [s for r in every for s in r["error_samples"]][:3]
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
    sim = Server(
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
        proxy = Server(
            _wedgewatch("proxy", "--upstream", sim.url, "--port", "0", *flags), work / "fproxy.log"
        )
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
    peer_kinds.require(opts.peers)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="wedgewatch-bench-proxy-") as tmp:
        work = Path(tmp)
        out: dict[str, Any] = {
            "command": "wedgewatch bench proxy"
            + (f" --peers {','.join(opts.peers)}" if opts.peers else "")
            + (" --view" if opts.view else ""),
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
