"""Kill -9 anywhere: ``serve``, ``wrap`` and ``run`` SIGKILLed at ten moments of their work (a
warm-up, streams in flight, a restart, right after a ledger write, a harness at work, an
evaluation), then started again on the same ledger. After each: no row lost (every request that
started has its end, every life its end), no process left (the killed command's servers and
harness are gone), ``wedgewatch ledger check`` clean, and a resumed run ends with the outcomes of
one never killed. Real subprocesses, real simulator servers, real SQLite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ledger_helpers import outcomes
from test_runner_sim import IDS, SEED2, write_config
from wedgewatch.base.processes import Identity
from wedgewatch.ledger import Ledger
from wedgewatch.testing import eventually

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.long


def _popen(*args: str, stdout: int = subprocess.DEVNULL) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "wedgewatch", *args],
        stdout=stdout,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        cwd=ROOT,
    )


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def _q(ledger: Path, sql: str) -> list[tuple[object, ...]]:
    if not ledger.exists():
        return []
    try:
        with Ledger(ledger, read_only=True) as lg:
            return [tuple(r) for r in lg.query(sql)]
    except Exception:  # not yet a ledger (the command is still creating it)
        return []


def _kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the command's whole process group (its agents with it: they share it)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _servers_alive(ledger: Path) -> list[int]:
    """Servers of the ledger's lives still running (by pid and start time)."""
    rows = _q(ledger, "SELECT pid, pid_space, pid_start FROM server_lives WHERE pid IS NOT NULL")
    return [int(p) for p, space, start in rows if Identity(int(p), str(space), start).alive()]  # type: ignore[arg-type]


def _after(ledger: Path) -> None:
    """What every kill must leave: its servers gone (the watcher killed them with the process),
    and, once the next start has run, every start with its end and the ledger check clean."""
    eventually(lambda: not _servers_alive(ledger), 30, what="the killed command's servers to be gone")
    open_requests = _q(
        ledger,
        "SELECT request_id FROM request_starts WHERE request_id NOT IN (SELECT request_id FROM requests)",
    )
    assert open_requests == [], "a request that started has no end"
    open_lives = _q(
        ledger, "SELECT life_id FROM server_lives WHERE life_id NOT IN (SELECT life_id FROM server_life_ends)"
    )
    assert open_lives == [], "a server life has no end"
    check = _cli("ledger", "check", str(ledger), "--json")
    assert check.returncode == 0, check.stdout
    assert json.loads(check.stdout)["ok"] is True


# --- serve ----------------------------------------------------------------------------------------

SERVE = """
[server]
profile = "sim"
scenario = "{scenario}"
log_dir = "{logs}"
scrape_interval = 0.2
heartbeat_window = 1.0
startup_timeout = 60
[server.warmup]
count = 1
max_tokens = {warm}
[run]
ledger = "{ledger}"
"""


def _serve_config(tmp_path: Path, scenario: str, warm: int = 4) -> tuple[Path, Path]:
    (tmp_path / "scenario.toml").write_text(scenario)
    ledger = tmp_path / "l.sqlite"
    cfg = tmp_path / "serve.toml"
    cfg.write_text(
        SERVE.format(scenario=tmp_path / "scenario.toml", logs=tmp_path / "logs", ledger=ledger, warm=warm)
    )
    return cfg, ledger


def _stream(url: str, text: str, max_tokens: int) -> subprocess.Popen[str]:
    """A streaming client in a process of its own (curl-like: it just reads)."""
    code = (
        "import sys, httpx\n"
        f"body = {{'model': 'sim-model', 'stream': True, 'max_tokens': {max_tokens},"
        f" 'messages': [{{'role': 'user', 'content': {text!r}}}]}}\n"
        "try:\n"
        f"    with httpx.stream('POST', {url + '/v1/chat/completions'!r}, json=body, timeout=None) as r:\n"
        "        for _ in r.iter_bytes(): pass\n"
        "except Exception: pass\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _serving(cfg: Path) -> tuple[subprocess.Popen[str], str]:
    proc = _popen("serve", str(cfg), "--port", "0", stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line.startswith("listening on "), line
    return proc, line.removeprefix("listening on ")


SLOW = "[server]\ntokens_per_s = 5.0\n"
SLOW_WARMUP = '[[fault]]\nwhen.contains = "hello world"\ntimes = 1\naction = "trickle"\nrate = 10.0\n'
WEDGE = '[[fault]]\nwhen.contains = "WEDGE"\ntimes = 1\naction = "wedge"\nafter_tokens = 2\n[startup]\nunready_seconds = 1.5\n'


def _serve_moments() -> Iterator[tuple[str, str, Callable[[Path, str], object]]]:
    def warmup(ledger: Path, url: str) -> object:
        return None  # the kill comes during the first warm-up: see the test

    def streams(ledger: Path, url: str) -> object:
        clients = [_stream(url, f"tell me {i}", 200) for i in range(5)]
        eventually(
            lambda: len(_q(ledger, "SELECT * FROM request_starts")) >= 5, 60, what="5 streams in flight"
        )
        return clients

    def restart(ledger: Path, url: str) -> object:
        client = _stream(url, "WEDGE please", 40)
        eventually(lambda: _q(ledger, "SELECT * FROM events WHERE kind = 'restart'"), 60, what="the restart")
        return client

    def after_write(ledger: Path, url: str) -> object:
        done = _stream(url, "one", 4)
        done.wait(timeout=60)
        eventually(lambda: _q(ledger, "SELECT * FROM requests"), 30, what="a request's end row")
        return done

    yield "a warm-up", SLOW_WARMUP, warmup
    yield "5 streams in flight", SLOW, streams
    yield "a restart", WEDGE, restart
    yield "right after a ledger write", "", after_write


@pytest.mark.parametrize(("moment", "scenario", "act"), [pytest.param(*m, id=m[0]) for m in _serve_moments()])
def test_serve_killed_then_started_again(
    tmp_path: Path, moment: str, scenario: str, act: Callable[[Path, str], object]
) -> None:
    cfg, ledger = _serve_config(tmp_path, scenario, warm=40 if moment == "a warm-up" else 4)
    if moment == "a warm-up":
        proc = _popen("serve", str(cfg), "--port", "0")
        eventually(lambda: _q(ledger, "SELECT * FROM server_lives"), 60, what="the first life")
        assert not _q(ledger, "SELECT * FROM server_life_ready"), "warm-up over before the kill"
    else:
        proc, url = _serving(cfg)
        act(ledger, url)
    started = len(_q(ledger, "SELECT * FROM request_starts"))
    _kill(proc)
    # The next start on the ledger closes what the killed one left open, then serves.
    again, _ = _serving(cfg)
    again.send_signal(signal.SIGTERM)
    assert again.wait(timeout=60) == 0
    _after(ledger)
    ends = _q(ledger, "SELECT outcome FROM requests")
    assert len(ends) >= started  # not one request lost: each that started has its end
    if moment == "5 streams in flight":
        assert sum(1 for (o,) in ends if o == "interrupted") == 5


# --- wrap -----------------------------------------------------------------------------------------

HARNESS = """
import concurrent.futures, os, httpx
url = os.environ["OPENAI_BASE_URL"] + "/chat/completions"
def ask(i):
    body = {"model": "sim-model", "stream": True, "max_tokens": 200,
            "messages": [{"role": "user", "content": f"task {i}"}]}
    with httpx.stream("POST", url, json=body, timeout=None) as r:
        for _ in r.iter_bytes(): pass
with open(os.environ["MARK"], "w") as f: f.write(str(os.getpid()))
with concurrent.futures.ThreadPoolExecutor(3) as pool:
    list(pool.map(ask, range(3)))
"""


@pytest.mark.parametrize("moment", ["a harness with 3 streams in flight", "a warm-up"])
def test_wrap_killed_then_started_again(tmp_path: Path, moment: str) -> None:
    warmup = moment == "a warm-up"
    cfg, ledger = _serve_config(tmp_path, SLOW_WARMUP if warmup else SLOW, warm=40 if warmup else 4)
    (tmp_path / "harness.py").write_text(HARNESS)
    mark = tmp_path / "harness.pid"
    env_cmd = ["env", f"MARK={mark}", sys.executable, str(tmp_path / "harness.py")]
    proc = _popen("wrap", str(cfg), "--", *env_cmd)
    if warmup:
        eventually(lambda: _q(ledger, "SELECT * FROM server_lives"), 60, what="the first life")
    else:
        eventually(lambda: len(_q(ledger, "SELECT * FROM request_starts")) >= 3, 60, what="3 streams")
    _kill(proc)
    if not warmup:
        harness = int(mark.read_text())
        # wrap's watcher ended the harness's group with wrap: nothing of it runs on.
        eventually(
            lambda: not Identity.of(harness).alive() or Identity.of(harness).start is None,
            30,
            what="the harness gone",
        )
    again = _cli("wrap", str(cfg), "--", "true")
    assert again.returncode == 0, again.stderr
    assert "ledger check: ok" in again.stderr  # wrap checks the ledger at its end
    _after(ledger)
    runs = _q(
        ledger,
        "SELECT h.harness_run_id, e.end_reason FROM harness_runs h JOIN harness_run_ends e USING (harness_run_id) ORDER BY h.started_at",
    )
    if not warmup:  # the killed wrap had written its run; the next start ended it interrupted
        assert [r[1] for r in runs] == ["interrupted", "exited"]


# --- run ------------------------------------------------------------------------------------------


def _run_moments() -> Iterator[tuple[str, str, str, str]]:
    """(moment, scenario faults, server settings, SQL that is non-empty at the moment)."""
    yield (
        "a warm-up",
        # 40 tokens at 1.5 x 20 a second: 1.3 s, inside the warm-up deadline (60 s / 20)
        SLOW_WARMUP.replace("rate = 10.0", "rate = 1.5"),
        "",
        "SELECT * FROM server_lives WHERE life_id NOT IN (SELECT life_id FROM server_life_ready)",
    )
    yield (
        "an attempt's request in flight",
        "",
        "",
        "SELECT * FROM request_starts WHERE request_id NOT IN (SELECT request_id FROM requests) AND attempt_id IS NOT NULL",
    )
    yield (
        "an evaluation",
        "",
        "",
        "SELECT * FROM evaluation_starts s WHERE NOT EXISTS (SELECT 1 FROM evaluations e "
        "WHERE e.attempt_id = s.attempt_id AND e.eval_no = s.eval_no)",
    )
    yield (
        "a restart (a planned recycle)",
        "[startup]\nunready_seconds = 40.0\n",
        "recycle_every_instances = 2\n",
        "SELECT * FROM events WHERE kind = 'restart'",
    )


@pytest.mark.parametrize(
    ("moment", "faults", "server", "when"), [pytest.param(*m, id=m[0]) for m in _run_moments()]
)
def test_run_killed_then_resumed_gives_the_outcomes_of_a_run_never_killed(
    tmp_path: Path, moment: str, faults: str, server: str, when: str
) -> None:
    cfg = write_config(tmp_path, skill=0.5, seed=2, ids=IDS[:5], concurrency=2, faults=faults, server=server)
    ledger = tmp_path / "c.sqlite"
    proc = _popen("run", str(cfg), "--run-id", "k", "--json")
    eventually(lambda: proc.poll() is not None or bool(_q(ledger, when)), 120, interval=0.005, what=moment)
    assert proc.poll() is None, f"the run ended before {moment}"
    _kill(proc)
    before = {
        t: len(_q(ledger, f"SELECT * FROM {t}"))
        for t in ("attempts", "requests", "request_starts", "server_lives", "events")
    }
    resumed = _cli("run", "--resume", "k", "--ledger", str(ledger), "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["state"] == "finished"
    assert "ledger check: ok" in resumed.stderr  # run checks the ledger at its end
    _after(ledger)
    with Ledger(ledger, read_only=True) as lg:
        assert outcomes(lg, "k") == SEED2, moment
        for table, n in before.items():
            assert len(lg.query(f"SELECT * FROM {table}")) >= n, f"{table}: rows lost"
