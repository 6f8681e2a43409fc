"""`wedgewatch bench proxy --peers nginx`: a real nginx in front of the same simulator, end to end.

nginx comes from Debian's package (`make install` installs it as root); without it the first test
fails with the bench's own one-line install hint, never a skip.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wedgewatch.bench.peers import NGINX_MISSING, names, nginx_binary
from wedgewatch.bench.proxy_table import render
from wedgewatch.errors import BadInput


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "wedgewatch", "bench", "proxy", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def _nginx_processes() -> set[int]:
    """Every live process running nginx (master or worker: the worker renames itself)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(b"nginx:"):
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def test_nginx_is_measured_beside_the_proxy_and_stopped_after() -> None:
    before = _nginx_processes()
    r = _bench(
        "--levels", "2", "--repeats", "1", "--duration", "0.5", "--warmup", "0.2",
        "--peers", "nginx", "--no-detection", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    (row,) = out["throughput"]["rows"]
    nginx = row["peers"]["nginx"]
    assert nginx["tokens_per_s"] > 0, nginx
    assert nginx["errors"] == 0, row["error_samples"]
    assert nginx["cpu_us_per_token"] > 0 and nginx["rss_mib"] > 0, nginx
    assert row["proxy_tokens_per_s"] > 0 and row["proxy_errors"] == 0
    assert _nginx_processes() <= before, "the bench left nginx running"
    table = render(out).split("Peers in the same runs")[1].splitlines()
    assert [line.split()[:3] for line in table if line.split()[1:2] in (["wedgewatch"], ["nginx"])] == [
        ["2", "wedgewatch", f"{row['proxy_tokens_per_s']:.0f}"],
        ["2", "nginx", f"{nginx['tokens_per_s']:.0f}"],
    ]


def test_a_missing_nginx_is_one_line_saying_how_to_install_it() -> None:
    with pytest.raises(BadInput) as err:
        nginx_binary(search="/nonexistent")
    assert str(err.value) == NGINX_MISSING
    assert "apt-get install -y nginx" in NGINX_MISSING and "\n" not in NGINX_MISSING


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("litellm", "not installable from this project's lock"),
        ("haproxy", "unknown peer"),
        ("nginx,nginx", "twice"),
    ],
)
def test_a_peer_we_cannot_measure_is_named_in_one_line(text: str, why: str) -> None:
    with pytest.raises(BadInput, match=why) as err:
        names(text)
    assert str(err.value).startswith("--peers: ")


def test_no_peers_by_default_and_bad_peers_exit_2_before_anything_starts() -> None:
    assert names("") == [] and names("nginx") == ["nginx"]
    r = _bench("--peers", "litellm", "--levels", "1")
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert "--peers: unknown peer 'litellm'" in line
