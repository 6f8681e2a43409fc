"""``wedgewatch bench view`` and ``bench proxy --view``, end to end and small (a real simulator,
the proxy alone with a ledger, a real view process, the load generator and the page's reader in
processes of their own). The figures are the bench's; what is asserted is that the page was fed
while the streams ran and showed every one of them, and that the proxy measured with a page
attached is put beside its own repeats."""

from __future__ import annotations

import json
import subprocess
import sys


def _wedgewatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", *args], capture_output=True, text=True, timeout=300
    )


def test_the_page_shows_every_stream_in_flight() -> None:
    r = _wedgewatch("bench", "view", "--streams", "6", "--seconds", "3", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    page = json.loads(r.stdout)["page"]
    assert page["batches"] >= 1 and page["bytes"] > 0
    assert page["rows_in_last_table"] == 6


def test_bench_proxy_measures_the_proxy_with_a_page_attached() -> None:
    r = _wedgewatch(
        "bench", "proxy", "--levels", "2", "--repeats", "2", "--duration", "0.8", "--warmup", "0.2",
        "--no-detection", "--view", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (row,) = json.loads(r.stdout)["throughput"]["rows"]
    view = row["view"]
    assert set(view) >= {"tokens_per_s", "itl_p99", "cpu_us_per_token", "page_bytes_per_s"}
    lo, hi = view["tokens_per_s"]["spread"]
    assert lo <= hi and view["tokens_per_s"]["with_view"] > 0
    assert view["page_bytes_per_s"] > 0  # the page was fed while the streams ran
