"""One page's live connection, read for a while (``python -m wedgewatch.bench.view_reader --url U
--seconds S``): what a browser on the view receives, counted as it arrives. One JSON line on
stdout: bytes per one-second window, the batches, and the rows of requests in the last table sent.
A process of its own, so its reads never compete inside the processes measured."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import aiohttp


async def read(url: str, seconds: float) -> dict[str, Any]:
    t0 = time.monotonic()
    windows: list[int] = [0] * max(1, int(seconds))
    batches, last_rows, pending = 0, 0, b""
    timeout = aiohttp.ClientTimeout(total=None, sock_read=seconds + 30)
    async with aiohttp.ClientSession(timeout=timeout) as s, s.get(url) as r:
        r.raise_for_status()
        while (now := time.monotonic() - t0) < seconds:
            try:
                chunk = await asyncio.wait_for(r.content.readany(), timeout=max(0.01, seconds - now))
            except TimeoutError:
                break
            if not chunk:
                break
            windows[min(len(windows) - 1, int(time.monotonic() - t0))] += len(chunk)
            pending += chunk.replace(b"\r\n", b"\n")  # aiohttp-sse ends its lines with CRLF
            while b"\n\n" in pending:
                event, pending = pending.split(b"\n\n", 1)
                if b"event: batch" in event:
                    batches += 1
                    if b'id="flight"' in event:
                        last_rows = event.count(b"data-request=")
    return {
        "seconds": seconds,
        "bytes": sum(windows),
        "bytes_per_s": sum(windows) / seconds,
        "max_bytes_in_a_second": max(windows),
        "batches": batches,
        "rows_in_last_table": last_rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    a = ap.parse_args()
    print(json.dumps(asyncio.run(read(a.url, a.seconds))))


if __name__ == "__main__":
    main()
