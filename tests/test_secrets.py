"""Secrets nowhere: each command started with a recognisable secret in every place a user can put
one (the key a client sends, a URL's query, ``[server] args``, ``[server] env``, a PostgreSQL
URL's password, a restart token), then every file the run left, every row of every table of its
ledger and every line it printed is searched for each secret: none is found. Every file and
directory it made is its user's only.

The server is the real simulator behind a launcher that, as vLLM does, prints its arguments (and
here its environment too) when it starts, so the log scrubber has something to scrub. Commands
run with ``WEDGEWATCH_LOG=DEBUG``: the most they ever print.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from wedgewatch.ledger import Ledger
from wedgewatch.suites.bundled import load_bundled
from wedgewatch.testing import eventually

pytestmark = pytest.mark.timeout(300)

SECRETS = {
    "client key": "sk-WWSECRET-client-71c9e2",
    "wrong key": "sk-WWSECRET-wrong-3f0a55",
    "query": "WWSECRET-query-2b7e41",
    "args --api-key": "WWSECRET-args-93d1c8",
    "args --hf-token=": "WWSECRET-hf-4a60b2",
    "env HF_TOKEN": "WWSECRET-env-c5f2d7",
    "env plain": "WWSECRET-envplain-8e1306",
    "restart token": "WWSECRET-restart-6d2a90",
    "postgresql password": "WWSECRET-pg-0d4b17",
}
CLIENT, WRONG, QUERY = SECRETS["client key"], SECRETS["wrong key"], SECRETS["query"]
SERVER_KEY = SECRETS["args --api-key"]


@dataclass
class Site:
    """One command's world: ``inputs`` (what the test wrote: configs, a launcher; they hold the
    secrets on purpose, so they are not searched), ``work`` (the commands' working directory:
    everything they write lands under it) and the lines they printed."""

    root: Path
    outputs: list[tuple[str, bytes]] = field(default_factory=list)

    @property
    def inputs(self) -> Path:
        return self.root / "in"

    @property
    def work(self) -> Path:
        return self.root / "work"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WEDGEWATCH_", "VLLM_", "OPENAI_"))}
        return {**env, "WEDGEWATCH_LOG": "DEBUG", **extra}

    def run(self, *args: str, ok: tuple[int, ...] = (0,), **env: str) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [sys.executable, "-m", "wedgewatch", *args],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=self.work,
            env=self.env(**env),
        )
        self.outputs.append((f"{args[0]} stdout", res.stdout.encode()))
        self.outputs.append((f"{args[0]} stderr", res.stderr.encode()))
        assert res.returncode in ok, f"wedgewatch {' '.join(args)}: {res.returncode}\n{res.stderr[-3000:]}"
        return res

    def start(self, *args: str, **env: str) -> Started:
        n = len(self.outputs)
        out, err = self.root / f"out{n}.txt", self.root / f"err{n}.txt"
        proc = subprocess.Popen(
            [sys.executable, "-m", "wedgewatch", *args],
            stdout=out.open("wb"),
            stderr=err.open("wb"),
            cwd=self.work,
            env=self.env(**env),
            start_new_session=True,
        )
        self.outputs.append((f"{args[0]} (out{n})", b""))
        first = eventually(lambda: _first_line(out, proc), timeout=120, what=f"{args[0]}'s first line")
        assert first.startswith("listening on "), first
        return Started(proc, first.removeprefix("listening on ").strip(), out, err, args[0], self)


@dataclass
class Started:
    proc: subprocess.Popen[bytes]
    url: str
    out: Path
    err: Path
    name: str
    site: Site

    @property
    def local(self) -> str:
        return self.url.replace("0.0.0.0", "127.0.0.1")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.site.outputs.append((f"{self.name} stdout", self.out.read_bytes()))
        self.site.outputs.append((f"{self.name} stderr", self.err.read_bytes()))
        return code


def _first_line(path: Path, proc: subprocess.Popen[bytes]) -> str | None:
    text = path.read_text(errors="replace")
    if "\n" in text:
        return text.splitlines()[0]
    assert proc.poll() is None, f"exited with {proc.returncode} before its first line"
    return None


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    s = Site(tmp_path)
    s.inputs.mkdir()
    s.work.mkdir()
    yield s


def loud_launcher(site: Site) -> Path:
    """``server.launcher`` of the sim profile: prints its arguments and its environment's
    secrets first, as vLLM prints its non-default arguments, then is the simulator."""
    path = site.inputs / "loud-sim"
    path.write_text(
        "#!/bin/sh\n"
        'echo "non-default args: $*"\n'
        "echo \"env: {'HF_TOKEN': '$HF_TOKEN', 'SOME_SETTING': '$SOME_SETTING'}\"\n"
        f'exec {sys.executable} -m wedgewatch "$@"\n'
    )
    path.chmod(0o700)
    return path


def server_config(site: Site, ledger: str, extra: str = "") -> Path:
    cfg = site.inputs / "config.toml"
    first = load_bundled()[0]["instance_id"]
    cfg.write_text(
        f"""
[server]
profile = "sim"
launcher = "{loud_launcher(site)}"
args = ["--api-key", "{SERVER_KEY}", "--hf-token={SECRETS["args --hf-token="]}", "--policy", "swe"]
env = {{ HF_TOKEN = "{SECRETS["env HF_TOKEN"]}", SOME_SETTING = "{SECRETS["env plain"]}" }}
time_scale = 20
scrape_interval = 0.2
[server.warmup]
count = 1
[agent]
step_limit = 6
[suite]
ids = ["{first}"]
[run]
ledger = "{ledger}"
workdir = "wd"
{extra}
"""
    )
    return cfg


def traffic(url: str, key: str | None = CLIENT, tag: str = "/a/tag-1") -> int:
    """What a client sends: its key as a bearer token and as x-api-key, secrets in the query, a
    tagged path (``tag``: the proxy's), a stream, a wrong key. Returns how many generations were
    answered 200."""
    ok = 0
    auth = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
    with httpx.Client(timeout=60) as c:
        for path, stream in (("/v1/chat/completions", False), (f"{tag}/v1/chat/completions", True)):
            r = c.post(
                f"{url}{path}?api_key={QUERY}&token={QUERY}", json={**body, "stream": stream}, headers=auth
            )
            ok += r.status_code == 200
        r = c.get(f"{url}/v1/models?key={QUERY}", headers={"x-api-key": key} if key else {})
        assert r.status_code == 200, r.text
        c.post(
            f"{url}/v1/chat/completions?api_key={QUERY}",
            json=body,
            headers={"Authorization": f"Bearer {WRONG}"},
        )
    return ok


def found(data: bytes) -> list[str]:
    return [name for name, value in SECRETS.items() if value.encode() in data]


def search_tree(root: Path) -> list[str]:
    hits = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            hits += [f"{path.relative_to(root)}: {n}" for n in found(path.read_bytes())]
    return hits


def exposed(root: Path) -> list[str]:
    """Files and directories under ``root`` that anyone but their user may read or write."""
    return [
        f"{p.relative_to(root)}: {oct(stat.S_IMODE(p.lstat().st_mode))}"
        for p in sorted(root.rglob("*"))
        if not p.is_symlink() and p.lstat().st_mode & 0o077
    ]


def dump(target: str) -> bytes:
    """Every row of every table of a ledger, as text."""
    with Ledger(target) as lg:
        tables = lg.tables()
        assert "requests" in tables
        rows = {t: [dict(r) for r in lg.query(f"SELECT * FROM {t}")] for t in tables}
    return json.dumps(rows, default=str).encode()


def check(site: Site, *ledgers: str) -> dict[str, bytes]:
    """No secret in any file under the work directory, row of ``ledgers`` or line printed; every
    file and directory made is the user's only. Returns the ledgers' dumps."""
    assert exposed(site.work) == []  # before this process opens a ledger (its umask is 022)
    assert search_tree(site.work) == []
    for name, data in site.outputs:
        assert found(data) == [], f"{name}: {data.decode(errors='replace')[-2000:]}"
    dumps = {t: dump(t) for t in ledgers}
    for target, data in dumps.items():
        assert found(data) == [], target
    if os.environ.get("WEDGEWATCH_FIGURES"):  # the counts docs/reliability.md quotes (pytest -s)
        made = list(site.work.rglob("*"))
        rows = sum(len(r) for d in dumps.values() for r in json.loads(d).values())
        lines = sum(len(data.splitlines()) for _, data in site.outputs)
        print(
            f"\nFIGURES files={sum(p.is_file() for p in made)} dirs={sum(p.is_dir() for p in made)} "
            f"rows={rows} tables={sum(len(json.loads(d)) for d in dumps.values())} lines={lines}"
        )
    return dumps


def test_sim(site: Site) -> None:
    sim = site.start(
        "sim", "--port", "0", "--hf-token", SECRETS["args --hf-token="], "--fault-log", "faults.jsonl",
        VLLM_API_KEY=CLIENT,
    )  # fmt: skip
    try:
        assert traffic(sim.url, tag="") == 2
    finally:
        assert sim.stop() == 0
    logged = b"".join(data for _, data in site.outputs)
    assert b"--hf-token ***" in logged, "the ignored secret flag was shown masked"
    check(site)


def test_proxy(site: Site) -> None:
    upstream = site.start("sim", "--port", "0", "--api-key", SERVER_KEY, "--time-scale", "20")
    proxy = site.start(
        "proxy", "--upstream", upstream.url, "--port", "0", "--records", "records/requests.jsonl",
        "--metrics-url", f"{upstream.url}/metrics",
        WEDGEWATCH_API_KEY=CLIENT, WEDGEWATCH_UPSTREAM_API_KEY=SERVER_KEY,
    )  # fmt: skip
    try:
        assert traffic(proxy.url) == 2
    finally:
        assert proxy.stop() == 0
        upstream.stop()
    rows = (site.work / "records" / "requests.jsonl").read_text().splitlines()
    assert len(rows) >= 2, "the proxy wrote its rows"
    check(site)


def test_serve(site: Site) -> None:
    ledger = "serve.sqlite"
    cfg = server_config(site, ledger, extra="")
    served = site.start(
        "serve", str(cfg), "--port", "0", "--host", "0.0.0.0",
        WEDGEWATCH_API_KEY=CLIENT, WEDGEWATCH_RESTART_TOKEN=SECRETS["restart token"],
    )  # fmt: skip
    try:
        assert traffic(served.local) == 2
        r = httpx.post(
            f"{served.local}/wedgewatch/restart",
            headers={"Authorization": f"Bearer {SECRETS['restart token']}"},
            json={},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        assert traffic(served.local) == 2
    finally:
        assert served.stop() == 0
    logs = sorted((site.work / ".wedgewatch" / "logs").glob("life-*.log"))
    assert len(logs) == 2, "two lives, each with its log"
    for log in logs:
        assert "non-default args:" in log.read_text() and "--api-key ***" in log.read_text()
    dumps = check(site, str(site.work / ledger))
    assert b"remote_restart" in dumps[str(site.work / ledger)]


def test_wrap(site: Site) -> None:
    cfg = server_config(site, "wrap.sqlite")
    harness = site.inputs / "harness.py"
    harness.write_text(
        "import json, os, urllib.request\n"
        "base = os.environ['OPENAI_BASE_URL']\n"
        f"url = base + '/chat/completions?api_key={QUERY}'\n"
        "body = json.dumps({'model': 'sim-model', 'max_tokens': 3,"
        " 'messages': [{'role': 'user', 'content': 'hi'}]}).encode()\n"
        "req = urllib.request.Request(url, body, {'Content-Type': 'application/json',"
        " 'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})\n"
        "print('status', urllib.request.urlopen(req, timeout=60).status)\n"
    )
    res = site.run("wrap", str(cfg), "--", sys.executable, str(harness), OPENAI_API_KEY=CLIENT)
    assert "status 200" in res.stdout
    check(site, str(site.work / "wrap.sqlite"))


def test_run_report_export_resume(site: Site, pg_url: str) -> None:
    """A run on a PostgreSQL ledger whose URL holds a password (the test server trusts every
    local user, so the password is carried and ignored), then every reader of it."""
    user, rest = pg_url.split("://", 1)[1].split("@", 1)
    secret_url = f"postgresql://{user}:{SECRETS['postgresql password']}@{rest}"
    cfg = server_config(site, secret_url)
    res = site.run("run", str(cfg), "--run-id", "r1", "--json")
    summary = json.loads(res.stdout)
    assert summary["ledger"].startswith(f"postgresql://{user}:***@")
    site.run("report", "r1", "--ledger", secret_url)
    site.run("report", "r1", "--ledger", secret_url, "--html", "out/report.html")
    site.run("export", "r1", "--ledger", secret_url, "--format", "results", "--out", "out/results.jsonl")
    site.run("lives", "r1", "--ledger", secret_url)
    # The ledger keeps no secret, so a resume without the config file cannot start the server.
    refused = site.run("run", "--resume", "r1", "--ledger", secret_url, ok=(2,))
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "server.args" in refused.stderr and "wedgewatch run CONFIG --resume r1" in refused.stderr
    site.run("run", str(cfg), "--resume", "r1", "--json")
    assert (site.work / "out" / "report.html").stat().st_size > 0
    dumps = check(site, secret_url)
    snapshot = json.loads(json.loads(dumps[secret_url])["runs"][0]["config_json"])
    assert snapshot["server"]["env"] == {"HF_TOKEN": "***", "SOME_SETTING": "***"}, "stored, masked"
    assert snapshot["server"]["args"][:3] == ["--api-key", "***", "--hf-token=***"]


def test_the_log_pump_scrubs_every_line_and_loses_none(tmp_path: Path) -> None:
    """A secret written in pieces (split across the pipe's reads), undecodable bytes, a last line
    without its end and 20,000 lines at full speed: every line arrives, in order, scrubbed."""
    from wedgewatch.base.redact import Scrubber
    from wedgewatch.supervisor.logpump import spawn_logged

    secret = SERVER_KEY
    script = (
        "import sys, time\n"
        "out = sys.stdout.buffer\n"
        f"s = {secret!r}.encode()\n"
        "out.write(b'key: ' + s[:5]); out.flush(); time.sleep(0.2)\n"
        "out.write(s[5:] + b' end\\n\\xff\\xfe not utf-8\\n'); out.flush()\n"
        "for n in range(20000):\n"
        "    out.write(b'line %d %s\\n' % (n, s))\n"
        "out.write(b'last without newline ' + s); out.flush()\n"
    )
    log = tmp_path / "logs" / "life.log"
    proc, pump = spawn_logged([sys.executable, "-c", script], log, Scrubber([secret]))
    assert proc.wait(timeout=60) == 0
    pump.join(timeout=60)
    data = log.read_bytes()
    assert secret.encode() not in data
    lines = data.split(b"\n")
    assert lines[0] == b"key: *** end" and lines[1] == b"\xff\xfe not utf-8"
    assert [ln for ln in lines[2:-1]] == [b"line %d ***" % n for n in range(20000)]
    assert lines[-1] == b"last without newline ***"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and stat.S_IMODE(log.parent.stat().st_mode) == 0o700
