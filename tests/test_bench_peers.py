"""`wedgewatch bench proxy --peers nginx`: a real nginx in front of the same simulator, end to end.

nginx comes from Debian's package (`make install` installs it as root); without it the first test
fails with the bench's own one-line install hint, never a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wedgewatch.base.errors import BadInput
from wedgewatch.bench.children import stop_group
from wedgewatch.bench.peers import NGINX_MISSING, names, nginx_binary
from wedgewatch.bench.procfs import cpu_seconds, group_cpu_seconds, group_pids
from wedgewatch.bench.proxy_table import render


def _bench(*args: str, tmp: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "wedgewatch", "bench", "proxy", *args]
    env = os.environ | ({"TMPDIR": str(tmp)} if tmp else {})
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _nginx_left_by(tmp: Path) -> list[str]:
    """nginx processes whose group leader ran from under ``tmp``, or is gone (an orphaned worker).

    A worker renames itself ``nginx: worker process``; its master, the group leader, keeps the
    bench's prefix directory on its command line, and that lies under the TMPDIR the bench got.
    """
    left = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        cmd = _cmdline(pid)
        if not cmd.startswith(b"nginx:"):
            continue
        try:
            leader = _cmdline(os.getpgid(pid))
        except ProcessLookupError:  # exited while we looked
            continue
        if not leader or str(tmp).encode() in leader:
            left.append(cmd.replace(b"\0", b" ").decode(errors="replace").strip())
    return left


def test_nginx_is_measured_beside_the_proxy_and_stopped_after(tmp_path: Path) -> None:
    r = _bench(
        "--levels", "2", "--repeats", "1", "--duration", "0.5", "--warmup", "0.2",
        "--peers", "nginx", "--no-detection", "--json", tmp=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    (row,) = out["throughput"]["rows"]
    nginx = row["peers"]["nginx"]
    # What the run reports, not how much its 0.5 s window saw (nothing, when other work has the
    # cores): the rates themselves are make bench's.
    assert isinstance(nginx["tokens_per_s"], float) and nginx["tokens_per_s"] >= 0, nginx
    assert nginx["errors"] == 0, row["error_samples"]
    # CPU is read in clock ticks (10 ms): this short run may use less, so its figure may be 0.0;
    # test_group_cpu_counts_every_member checks the reading itself.
    assert nginx["cpu_us_per_token"] is not None and nginx["rss_mib"] > 0, nginx
    assert isinstance(row["proxy_tokens_per_s"], float) and row["proxy_errors"] == 0
    assert _nginx_left_by(tmp_path) == [], "the bench left nginx running"
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


_BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint('burnt', flush=True)\ntime.sleep(60)"


def test_group_cpu_counts_every_member_and_stop_group_leaves_none() -> None:
    """nginx is a master and a worker: the bench reads CPU over the group, as here two burners."""
    burner = f'{sys.executable} -c "{_BURN}"'
    p = subprocess.Popen(
        ["sh", "-c", f"{burner} & {burner} & wait"], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert p.stdout is not None
        # Both burners write to one pipe: their lines may interleave ("burntburnt\n\n").
        said = ""
        while said.count("burnt") < 2:
            line = p.stdout.readline()
            assert line, f"a burner ended early: {said!r}"
            said += line
        assert len(group_pids(p.pid)) == 3  # the shell and its two children
        assert group_cpu_seconds(p.pid) >= 0.55  # 2 x 0.3 s, less a tick each
        assert cpu_seconds(p.pid) < 0.3  # the leader alone burnt nothing
    finally:
        stop_group(p)
    assert group_pids(p.pid) == []
