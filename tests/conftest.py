"""Shared fixtures. Servers are real subprocesses on 127.0.0.1; nothing of ours is mocked.

xdist makes a module- or session-scoped fixture once per worker that needs it, so the tests that
share a costly one carry one ``xdist_group`` (``make test`` runs ``--dist loadgroup``): they run on
one worker and the fixture is made once. So do the tests that import a heavy package in this
process (litellm, the Anthropic SDK, statsmodels), which import it inside the tests, not at the
module's top: every worker imports every test module to collect it. The groups hold only on
pytest below 9.2 (tests/test_xdist_groups.py); before that pin, the default demo ran once per
worker that had one of its tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The tests that import statsmodels and scipy (about 1.1 CPU-s) run on one worker, which alone
# pays for the import.
STATSMODELS = pytest.mark.xdist_group("statsmodels")


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background of a non-interactive shell (`make test &` in a script)
    inherits SIGINT ignored, and every process it starts would too: Python keeps an ignored SIGINT
    ignored, so the Ctrl-C tests' runners would finish their runs instead of stopping. The tests
    start their children with the default, as a terminal would."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_report_header(config: pytest.Config) -> str:
    """The browser the view's tests drive, and Playwright's version (tests/test_view_browser.py)."""
    from test_view_browser import chromium_versions

    return "view's browser tests: " + chromium_versions()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``long`` (ten seconds or more of real runs) first. xdist hands out whole
    groups first, largest first, then single tests in collection order: a long test handed out
    near the end keeps its worker busy while the others have finished.

    Before that, the users of each of the rig's servers one after another (``RIG_ORDER``): a
    server stops after the last test in a row that uses it (``pytest_runtest_teardown``), so two
    vLLMs never idle side by side for the rest of the run."""

    def rank(item: pytest.Item) -> int:
        names = getattr(item, "fixturenames", ())
        return next((i for i, name in enumerate(RIG_ORDER) if name in names), len(RIG_ORDER))

    items.sort(key=lambda item: (rank(item), item.get_closest_marker("long") is None))


@dataclass
class RunningServer:
    """A server subprocess and the URL it printed on its first line."""

    proc: subprocess.Popen[str]
    url: str  # http://127.0.0.1:PORT (no /v1)
    log_path: Path

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)


def launch(
    argv: list[str], log_path: Path, timeout: float = 30.0, prefix: str = "listening on "
) -> RunningServer:
    """Start ``argv`` in its own process group and wait for ``listening on URL`` (``prefix`` URL)
    on stdout."""
    log = log_path.open("w")
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True, cwd=ROOT
    )
    assert proc.stdout is not None
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        os.killpg(proc.pid, signal.SIGKILL)
        raise RuntimeError(f"{argv} printed nothing in {timeout}s; log:\n{log_path.read_text()}")
    line = proc.stdout.readline().strip()
    if not line.startswith(prefix):
        proc.kill()
        raise RuntimeError(f"{argv} first line was {line!r}; log:\n{log_path.read_text()}")
    return RunningServer(proc, line.removeprefix(prefix).rstrip("/"), log_path)


@dataclass
class DefaultDemo:
    """``wedgewatch demo`` as README's quick tour writes it, run once in a directory of its own:
    what it printed, and the document it wrote (``wedgewatch-demo/summary.json``, what ``--json``
    prints)."""

    cwd: Path
    command: str
    stdout: str
    stderr: str
    doc: dict[str, Any]

    @property
    def out(self) -> Path:
        return self.cwd / "wedgewatch-demo"


@pytest.fixture(scope="session")
def default_demo(tmp_path_factory: pytest.TempPathFactory) -> DefaultDemo:
    """The default demo, shared by tests/test_demo.py and tests/test_quick_tour.py: a test using
    it carries ``xdist_group("default-demo")``, so it runs once (about a minute of CPU)."""
    cwd = tmp_path_factory.mktemp("tour")
    command = "wedgewatch demo"
    bin_dir = str(Path(sys.executable).parent)
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=590,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # The demo checks its ledger's invariants at its end, in one line on stderr.
    assert "ledger check: ok" in done.stderr, done.stderr[-3000:]
    doc = json.loads((cwd / "wedgewatch-demo" / "summary.json").read_text())
    return DefaultDemo(cwd, command, done.stdout, done.stderr, doc)


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[..., RunningServer]]:
    """Factory: ``start_sim("--scenario", "healthy", "--time-scale", "10")`` -> RunningServer."""
    started: list[RunningServer] = []

    def _start(*args: str) -> RunningServer:
        n = len(started)
        server = launch(
            [sys.executable, "-m", "wedgewatch", "sim", "--port", "0", *args], tmp_path / f"sim{n}.log"
        )
        started.append(server)
        return server

    yield _start
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def keywords_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One simulator per module on the bundled ``keywords`` scenario (a fault by a word in the
    prompt: STALL-TTFT, STALL-MID after 5 tokens, HTTP-503, DROP after 3, ...), pinging every
    0.2 s on open streams so every stall test also shows that pings keep nothing alive."""
    argv = [sys.executable, "-m", "wedgewatch", "sim", "--port", "0", "--scenario", "keywords"]
    server = launch([*argv, "--sse-ping-interval", "0.2"], tmp_path_factory.mktemp("sim") / "sim.log")
    yield server
    server.stop()


@dataclass
class Watched:
    """A proxy in this process in front of the module's ``keywords_sim``, with its SQLite ledger,
    the events it published and its clock."""

    sim: RunningServer
    proxy: Any  # wedgewatch.proxy.Proxy (imported by the fixture: conftest stays light)
    ledger: Any  # wedgewatch.ledger.Ledger
    events: list[Any]
    clock: Any  # wedgewatch.testing.ManualClock for ``watched_manual``, else the system's

    async def received(self) -> int:
        """Generation requests the simulator has received so far (its /sim/stats)."""
        import aiohttp

        async with aiohttp.ClientSession() as s, s.get(self.sim.url + "/sim/stats") as r:
            return int((await r.json())["received"])

    def rows(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.ledger.query("SELECT * FROM requests ORDER BY started_at")]

    async def wait_received(self, n: int) -> None:
        """Wait until the simulator has received ``n`` generation requests in all."""
        from wedgewatch.testing import eventually_async

        async def done() -> bool:
            return await self.received() >= n

        await eventually_async(done, what=f"{n} requests received upstream")

    async def tokens_in_flight(self, n: int) -> None:
        """Wait until the one request in flight has had ``n`` tokens (or more) from upstream."""
        from wedgewatch.testing import eventually_async

        await eventually_async(
            lambda: [r["tokens_out"] >= n for r in self.proxy.status()["in_flight"]] == [True],
            what=f"{n} tokens in flight",
        )

    async def past_the_deadline(self, call: Any, before: int, tokens: int = 0, window: float = 1.0) -> None:
        """For ``call`` (a task: one request, made when the simulator had received ``before``), on
        ``watched_manual``: wait until the request is upstream and has had ``tokens`` tokens, move
        the clock to just short of ``window`` (nothing may have fired), then past it. The caller
        then awaits ``call``, with no more time passing: a stall is raised at once or never."""
        await self.wait_received(before + 1)
        if tokens:
            await self.tokens_in_flight(tokens)
        await self.clock.advance(window - 0.1)
        assert not call.done() and self.proxy.in_flight() == 1 and self.rows() == []
        await self.clock.advance(0.2)


async def _watched(keywords_sim: RunningServer, tmp_path: Path, manual: bool) -> AsyncIterator[Watched]:
    from wedgewatch.base.clock import SYSTEM
    from wedgewatch.base.events import EventBus
    from wedgewatch.config import WatchdogConfig
    from wedgewatch.ledger import Ledger
    from wedgewatch.proxy import Proxy
    from wedgewatch.testing import ManualClock

    ledger = Ledger(tmp_path / "ledger.sqlite")
    bus = EventBus()
    events: list[Any] = []
    bus.subscribe(events.append)
    # On the manual clock the deadlines are 1 s, run out by the test; on the real clock they are
    # 60 s, which no healthy gap meets: a real 1 s ran out before the error a test waited for
    # when two busy processes had the cores (a test that wants a stall moves the manual clock).
    deadline = 1 if manual else 60
    cfg = WatchdogConfig(ttft_timeout=deadline, stall_timeout=deadline, min_rate=0, total_timeout=90)
    clock = ManualClock() if manual else SYSTEM
    proxy = Proxy(keywords_sim.url, cfg, ledger=ledger, bus=bus, clock=clock)
    await proxy.start()
    yield Watched(keywords_sim, proxy, ledger, events, clock)
    await proxy.stop()
    ledger.close()


@pytest.fixture
async def watched(keywords_sim: RunningServer, tmp_path: Path) -> AsyncIterator[Watched]:
    """A ``Watched`` proxy on the real clock, its first-token and mid-stream deadlines 60 s (none
    fires on healthy traffic, however busy the machine), no rate check."""
    async for w in _watched(keywords_sim, tmp_path, manual=False):
        yield w


@pytest.fixture
async def watched_manual(keywords_sim: RunningServer, tmp_path: Path) -> AsyncIterator[Watched]:
    """``watched`` on a ``ManualClock`` with 1 s deadlines: they fire only when the test advances it."""
    async for w in _watched(keywords_sim, tmp_path, manual=True):
        yield w


def sse_events(raw: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    """A whole SSE body as (event name, decoded data) pairs, comments and [DONE] left out."""
    from wedgewatch.wire.sse import SSEParser

    parser = SSEParser()
    events = parser.feed(raw) + parser.close()
    return [(e.event, json.loads(e.data)) for e in events if e.data is not None and e.data != b"[DONE]"]


@pytest.fixture
def start_proxy() -> Iterator[Callable[..., str]]:
    """Factory: ``start_proxy(upstream_url, ledger=None, **watchdog_fields)`` runs the real
    watchdog proxy (``wedgewatch.proxy.Proxy``) in its own event-loop thread, for tests whose code
    under test is synchronous (agents). Returns the proxy's root URL (no ``/v1``)."""
    import asyncio
    import threading

    from wedgewatch.config import WatchdogConfig
    from wedgewatch.proxy import Proxy

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-proxy", daemon=True)
    thread.start()
    proxies: list[Proxy] = []

    def _start(upstream: str, ledger: object = None, **watchdog: float) -> str:
        async def make() -> str:
            proxy = Proxy(upstream, WatchdogConfig(**watchdog), ledger=ledger)  # type: ignore[arg-type]
            proxies.append(proxy)
            return await proxy.start()

        return asyncio.run_coroutine_threadsafe(make(), loop).result(timeout=30)

    yield _start
    for proxy in proxies:
        asyncio.run_coroutine_threadsafe(proxy.stop(), loop).result(timeout=30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


@pytest.fixture(scope="session")
def testbed_images() -> Callable[[int], str]:
    """Factory: ``testbed_images(n)`` is the SWE-bench-layout image of bundled instance ``n``,
    built with podman once per session (and reused across sessions: its tag hashes its content).
    Fails, not skips, without podman: `make install` provides it on this machine kind."""
    from sandbox_helpers import require_tools
    from wedgewatch.sandbox import testbed
    from wedgewatch.suites import load_bundled

    require_tools("podman", "runc")
    built: dict[int, str] = {}

    def image(n: int) -> str:
        if n not in built:
            built[n] = testbed.build(load_bundled()[n], cli="podman")
        return built[n]

    return image


@pytest.fixture(scope="session")
def pg_server() -> Iterator[object]:
    """One real PostgreSQL per test session (tests/pg_server.py)."""
    from pg_server import start

    yield from start()


@pytest.fixture
def pg_url(pg_server: object) -> str:
    """The URL of a fresh, empty database on the session's PostgreSQL."""
    from pg_server import PgServer

    assert isinstance(pg_server, PgServer)
    return pg_server.new_database()


async def read_cut(resp: Any) -> tuple[bytes, bool]:
    """An aiohttp response's body as far as it came, and whether it was cut short: a stream that
    failed once begun ends with its error event and then no last chunk (proxy/http.py
    ``cut_short``), which aiohttp raises on as an incomplete payload."""
    import aiohttp

    body = bytearray()
    try:
        async for piece in resp.content.iter_any():
            body.extend(piece)
    except aiohttp.ClientPayloadError:
        return bytes(body), True
    return bytes(body), False


# --- the real-engine rig (tests/engine_rig.py says how to use it) ----------------------------


@pytest.fixture(scope="session", autouse=True)
def engine_pause() -> Iterator[Any]:
    """``WEDGEWATCH_TEST_ENGINE_PAUSE=S``: every vLLM EngineCore this process starts is stopped for
    S seconds once its server first answers /health (engine_rig.FirstStepPause); off otherwise."""
    from engine_rig import FirstStepPause, pause_seconds

    seconds = pause_seconds()
    if not seconds:
        yield None
        return
    pause = FirstStepPause(seconds)
    pause.start()
    yield pause
    pause.close()


RIG_ORDER = ("vllm_faults",)
_RIGS: dict[str, Any] = {}
"""The rig's servers started so far, by fixture name."""


def _rig(name: str, start: Callable[[], Any]) -> Any:
    """The server ``name``, started by ``start`` the first time; a start that failed fails each
    of its users at once (a second start would fail as the first, after as long)."""
    if name not in _RIGS:
        try:
            _RIGS[name] = start()
        except Exception as exc:  # every kind of start failure, kept for the next users
            _RIGS[name] = exc
            raise
    got = _RIGS[name]
    if isinstance(got, Exception):
        raise RuntimeError(f"the rig's {name} did not start: {got}")
    return got


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """A rig's server stops once the next test does not use it (its users run in a row:
    ``pytest_collection_modifyitems``): an idle CPU vLLM still costs memory and CPU. After the
    item's own teardown (``trylast``): its fixtures may still talk to the server."""
    for name in list(_RIGS):
        if nextitem is None or name not in getattr(nextitem, "fixturenames", ()):
            got = _RIGS.pop(name)
            if not isinstance(got, Exception):
                got.stop()


@pytest.fixture(scope="session")
def vllm_faults(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A supervised CPU vLLM for the tests that wedge, kill or freeze it, behind a proxy whose
    wedged clients are released with an error (``on_wedge = "fail"``). Each test strikes the
    current life and leaves the next one ready. An ``engine_rig.Rig``."""
    from engine_rig import Rig
    from vllm_helpers import config, provision
    from wedgewatch.config import WatchdogConfig

    def start() -> Any:
        provision()
        tmp = tmp_path_factory.mktemp("vllm-faults")
        # --enable-scale-out: the render endpoints a begun Responses or Messages stream is
        # continued from (proxy/resume/typed_ids.py).
        cfg = config(tmp, args=["--max-model-len", "4096", "--enable-scale-out"])
        return Rig.start(cfg, WatchdogConfig(on_wedge="fail"), tmp / "ledger.sqlite")

    return _rig("vllm_faults", start)
