"""The text table of ``wedgewatch bench proxy`` (the figures come from ``bench.proxy.run``)."""

from __future__ import annotations

from typing import Any

_API = {"chat": "chat completions", "responses": "the Responses API", "messages": "the Messages API"}


def _ms(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:+.2f}" if signed else f"{v * 1000:.2f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def render(result: dict[str, Any]) -> str:
    tp = result["throughput"]
    header = ["streams", "direct tok/s", "proxy tok/s", "ratio", "TTFT p50 ms d/p", "TTFT p99 ms d/p"]
    header += ["ITL p50 ms d/p", "ITL p99 ms d/p", "+TTFT p50", "+ITL p99", "CPU us/tok", "RSS MiB", "errors"]
    rows = []
    for r in tp["rows"]:
        rows.append(
            [
                str(r["streams"]),
                f"{r['direct_tokens_per_s']:.0f}",
                f"{r['proxy_tokens_per_s']:.0f}",
                f"{r['ratio']:.3f}" if r["ratio"] is not None else "-",
                f"{_ms(r['direct_ttft_p50'])}/{_ms(r['proxy_ttft_p50'])}",
                f"{_ms(r['direct_ttft_p99'])}/{_ms(r['proxy_ttft_p99'])}",
                f"{_ms(r['direct_itl_p50'])}/{_ms(r['proxy_itl_p50'])}",
                f"{_ms(r['direct_itl_p99'])}/{_ms(r['proxy_itl_p99'])}",
                _ms(r["added_ttft_p50"], signed=True),
                _ms(r["added_itl_p99"], signed=True),
                f"{r['proxy_cpu_us_per_token']:.1f}" if r["proxy_cpu_us_per_token"] is not None else "-",
                f"{r['proxy_rss_mib']:.0f}",
                f"{r['direct_errors']}/{r['proxy_errors']}",
            ]
        )
    opts = result["options"]
    out = [
        f"Throughput ({_API.get(opts.get('api', 'chat'), 'chat completions')}): "
        f"{opts['max_tokens']} one-token chunks per request at {opts['tokens_per_s']:g} tokens/s "
        f"per stream; medians of {opts['repeats']} interleaved repeats of {opts['duration']:g} s "
        f"(d = direct, p = through the proxy; + = added by the proxy)",
        layout_line(tp.get("cpu_layout")),
        _table(header, rows),
        f"False stalls on healthy traffic (shipped deadlines): {tp['false_stalls']}; proxy outcomes: "
        f"{tp['proxy_requests']}; proxy peak RSS {tp['proxy_peak_rss_mib']:.0f} MiB",
    ]
    if tp["rows"] and tp["rows"][0].get("peers"):
        out += ["", *peer_table(tp)]
    if tp["rows"] and tp["rows"][0].get("view"):
        from wedgewatch.bench.view import attached_table

        out += ["", *attached_table(tp["rows"])]
    for r in tp["rows"]:
        for s in r["error_samples"]:
            out.append(f"  error sample at {r['streams']} streams: {s}")
    det = result.get("detection")
    if det:
        header = [
            "stall kind",
            "window s",
            "clock starts at",
            "ratio median",
            "ratio max",
            "excess max s",
            "wrong",
        ]
        drows = [
            [
                d["kind"],
                f"{d['window']:g}",
                d["from"],
                f"{d['ratio_median']:.3f}" if d["ratio_median"] is not None else "-",
                f"{d['ratio_max']:.3f}" if d["ratio_max"] is not None else "-",
                f"{d['excess_max_s']:+.3f}" if d["excess_max_s"] is not None else "-",
                f"{d['wrong_outcome']}/{d['requests']}",
            ]
            for d in det["rows"]
        ]
        out += [
            "",
            "Detection: seconds from the window's start to the OpenAI SDK's error, over the window "
            "(target: excess <= 0.5 s)",
            _table(header, drows),
            f"Requests sent {det['sent']}, simulator received {det['sim_received']} (no retries), "
            f"aborted upstream {det['sim_aborted']}",
        ]
    la, lb = result["load_before"], result["load_after"]
    out.append(
        f"\n{result['cpus']} CPUs; load average {la[0]:.1f} before, {lb[0]:.1f} after; {result['seconds']:.0f} s"
    )
    return "\n".join(out)


def layout_line(cpus: dict[str, list[int]] | None) -> str:
    if cpus is None:
        return "CPUs: not pinned; simulator, load generator and proxy share every CPU"
    return (
        f"CPUs: proxy on {cpus['proxy']}, simulator and load generator on {cpus['simulator_and_load']} "
        "(one core for the proxy alone; --no-pin shares them)"
    )


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def peer_table(tp: dict[str, Any]) -> list[str]:
    """The proxy and each peer side by side, each against the direct runs of the same repeats."""
    header = ["streams", "target", "tok/s", "of direct", "TTFT p50 ms", "+TTFT p50", "ITL p99 ms"]
    header += ["+ITL p99", "CPU us/tok", "RSS MiB", "errors"]
    rows = []
    for r in tp["rows"]:
        own = {
            "tokens_per_s": r["proxy_tokens_per_s"],
            "ratio": r["ratio"],
            "ttft_p50": r["proxy_ttft_p50"],
            "added_ttft_p50": r["added_ttft_p50"],
            "itl_p99": r["proxy_itl_p99"],
            "added_itl_p99": r["added_itl_p99"],
            "cpu_us_per_token": r["proxy_cpu_us_per_token"],
            "rss_mib": r["proxy_rss_mib"],
            "errors": r["proxy_errors"],
        }
        for name, m in {"wedgewatch": own, **r["peers"]}.items():
            rows.append(
                [
                    str(r["streams"]),
                    name,
                    _num(m["tokens_per_s"], ".0f"),
                    _num(m["ratio"], ".3f"),
                    _ms(m["ttft_p50"]),
                    _ms(m["added_ttft_p50"], signed=True),
                    _ms(m["itl_p99"]),
                    _ms(m["added_itl_p99"], signed=True),
                    _num(m["cpu_us_per_token"], ".1f"),
                    _num(m["rss_mib"], ".1f"),
                    str(m["errors"]),
                ]
            )
    peaks = ", ".join(f"{n} {v:.1f} MiB" for n, v in tp.get("peer_peak_rss_mib", {}).items())
    return [
        "Peers in the same runs, on the proxy's CPU (medians; + = added over direct; CPU and RSS over "
        "each target's process group)",
        _table(header, rows),
        f"Peak RSS: wedgewatch {tp['proxy_peak_rss_mib']:.0f} MiB, {peaks}",
    ]
