"""Attempts on Ray (``run.executor = "ray"``) end to end: a real Ray (one ``ray start`` cluster
the tests join, and one local Ray a run starts for itself), the simulator, real sandboxes.

Ray is an extra, installed by `make install`: without it these tests fail, they do not skip.
Ray is heavy on a small machine (a start costs about 8 CPU-seconds), so the tests share one
cluster and only the Ctrl-C test starts a local Ray of its own: that is the path that must leave
no process behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ledger_helpers import outcomes
from ray_helpers import RayCluster, descendants, outward_address, start_cluster, still_running, titled
from test_runner_sim import IDS, SEED2, _processes_with, write_config
from wedgewatch.base.errors import ExecutorError
from wedgewatch.config import load_config
from wedgewatch.ledger import Ledger
from wedgewatch.runner import entry as runner_main
from wedgewatch.runner.state import RunContext
from wedgewatch.testing import eventually, eventually_async

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("ray")]  # one worker starts `cluster` once


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """The cluster the runs join, with token authentication as a real one should have: the
    cluster and every driver that joins it (these tests' runs) get the token from the
    environment, as docs/scale-out.md tells users to do."""
    root = tmp_path_factory.mktemp("ray")
    token = root / "auth_token"
    token.write_text(secrets.token_hex(32))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_AUTH_MODE", "token")
        env.setenv("RAY_AUTH_TOKEN_PATH", str(token))
        c = start_cluster(root)
        try:
            yield c
        finally:
            c.stop()


def on_ray(path: Path, address: str | None = None, proxy_host: str = "127.0.0.1", more: str = "") -> Path:
    """The config at ``path`` with its attempts on Ray: the cluster at ``address``, or a local Ray
    the run starts (2 CPUs, a small object store); ``more``: further ``[run.ray]`` lines."""
    where = f'address = "{address}"\n' if address else "local_cpus = 2\nobject_store_mb = 100\n"
    ray = f'executor = "ray"\n[run.ray]\n{where}proxy_host = "{proxy_host}"\n{more}'
    path.write_text(path.read_text() + ray)
    return path


def end_rows(ledger: Path, run_id: str) -> dict[str, Any]:
    with Ledger(ledger) as lg:
        rows = lg.query("SELECT * FROM attempt_view WHERE run_id = ? ORDER BY attempt_id", (run_id,))
        return {r["attempt_id"]: {**dict(r), "detail": json.loads(r["detail_json"] or "{}")} for r in rows}


def _a_worker(ctx: RunContext, but: list[str] | None = None) -> tuple[str, int] | None:
    """An attempt in flight (not one of ``but``) and the pid of the worker process Ray titled with
    its task's name, once there is one."""
    for attempt_id in list(ctx.inflight):
        pids = titled(f"ray::attempt:{attempt_id}")
        if pids and attempt_id not in (but or []):
            return attempt_id, pids[0]
    return None


def test_a_suite_on_ray_ends_as_on_the_local_executor(tmp_path: Path, cluster: RayCluster) -> None:
    before = cluster.processes()
    local = load_config(write_config(tmp_path, skill=0.5, seed=2, ids=IDS[:5], concurrency=2, name="local"))
    path = write_config(tmp_path, skill=0.5, seed=2, ids=IDS[:5], concurrency=2, name="ray")
    # As on a cluster of several hosts: the proxy on an address of this machine other hosts
    # would reach, and the agents in Ray's workers sent there.
    outward = outward_address()
    # Resources declared per attempt, as a real config would (half a CPU, 256 MiB).
    resources = "num_cpus = 0.5\nmemory_mb = 256\n"
    on_cluster = load_config(on_ray(path, cluster.address, proxy_host=outward, more=resources))
    refused: list[int] = []

    def probe(ctx: RunContext) -> None:
        async def knock() -> None:
            # The proxy bound beyond loopback is no open door: without the run's key (which only
            # its agents were given), a request is refused.
            url = await eventually_async(lambda: ctx.proxy_url, timeout=120, what="the proxy's URL")
            async with aiohttp.ClientSession() as s:
                for headers in ({}, {"Authorization": "Bearer wedgewatch"}):
                    async with s.get(url + "/v1/models", headers=headers) as r:
                        refused.append(r.status)

        ctx.loop.create_task(knock())  # type: ignore[union-attr]

    assert runner_main.start(local, run_id="local").end_mark == "finished"
    assert runner_main.start(on_cluster, run_id="ray", on_context=probe).end_mark == "finished"
    assert refused == [401, 401]
    with Ledger(local.run.ledger) as lg:
        by_local = outcomes(lg, "local")
    with Ledger(on_cluster.run.ledger) as lg:
        by_ray = outcomes(lg, "ray")
    assert by_ray == by_local == SEED2
    rows = end_rows(Path(on_cluster.run.ledger), "ray")
    assert len(rows) == 5  # one model-side attempt each, as locally
    with Ledger(on_cluster.run.ledger) as lg:
        requests = lg.query("SELECT COUNT(*) FROM requests WHERE attempt_id LIKE 'ray-%'")[0][0]
    assert requests >= 5  # every agent reached the proxy at the outward address
    assert not outward.startswith("127.")
    for row in rows.values():
        worker = row["detail"]["worker"]  # only a Ray task reports where it ran
        assert worker["pid"] != os.getpid() and worker["node_id"]
    # Joined, so left running: every process of the cluster is still there, and this process
    # holds no connection to it.
    assert still_running(before) == before
    import ray  # not at the top: Ray reads RAY_AUTH_MODE once, when first imported

    assert not ray.is_initialized()


def test_a_killed_worker_ends_its_attempt_worker_lost_and_the_instance_is_attempted_again(
    tmp_path: Path, cluster: RayCluster
) -> None:
    cfg = load_config(on_ray(write_config(tmp_path, ids=IDS[:2], concurrency=2), cluster.address))
    seen: dict[str, Any] = {}

    def on_context(ctx: RunContext) -> None:
        async def kill_a_worker() -> None:
            # From the driver's side: the attempt in flight, and the worker process Ray titled
            # with its task's name.
            attempt_id, pid = await eventually_async(lambda: _a_worker(ctx), timeout=120, what="a worker")
            os.kill(pid, signal.SIGKILL)
            seen["killed"] = (attempt_id, pid)

        seen["task"] = asyncio.get_running_loop().create_task(kill_a_worker())

    assert runner_main.start(cfg, run_id="lost", on_context=on_context).end_mark == "finished"
    killed, pid = seen["killed"]
    rows = end_rows(Path(cfg.run.ledger), "lost")
    lost = rows[killed]
    assert (lost["status"], lost["reason"]) == ("interrupted", "worker_lost")
    assert "WorkerCrashedError" in lost["detail"]["error"]
    later = [
        r
        for r in rows.values()
        if r["instance_id"] == lost["instance_id"] and r["attempt_no"] > lost["attempt_no"]
    ]
    assert [(r["status"], r["detail"]["worker"]["pid"] != pid) for r in later] == [("submitted", True)]
    with Ledger(cfg.run.ledger) as lg:
        assert outcomes(lg, "lost") == dict.fromkeys(IDS[:2], "resolved")
        budget = lg.query(
            "SELECT n_infra FROM instance_outcomes WHERE instance_id = ?", (lost["instance_id"],)
        )
    assert budget[0]["n_infra"] == 0  # a lost worker uses none of the instance's budget


def test_an_instance_that_keeps_losing_its_worker_stops_the_run_at_the_limit(
    tmp_path: Path, cluster: RayCluster
) -> None:
    """run.ray.lost_worker_limit: every worker that takes the instance is killed; after 2 losses
    the run stops, aborted and resumable, rather than loop on the cluster's trouble."""
    path = write_config(tmp_path, ids=IDS[:1], concurrency=1)
    cfg = load_config(on_ray(path, cluster.address, more="lost_worker_limit = 2\n"))
    killed: list[str] = []

    def on_context(ctx: RunContext) -> None:
        async def kill_every_worker() -> None:
            while True:  # each attempt's worker, as it comes, until the run stops
                attempt_id, pid = await eventually_async(
                    lambda: _a_worker(ctx, but=killed), timeout=600, what="a new worker"
                )
                os.kill(pid, signal.SIGKILL)
                killed.append(attempt_id)

        asyncio.get_running_loop().create_task(kill_every_worker())

    with pytest.raises(ExecutorError, match="2 attempts lost their worker"):
        runner_main.start(cfg, run_id="lossy", on_context=on_context)
    rows = end_rows(tmp_path / "c.sqlite", "lossy")
    assert sorted(rows) == killed and len(killed) == 2
    assert {(r["status"], r["reason"]) for r in rows.values()} == {("interrupted", "worker_lost")}
    with Ledger(cfg.run.ledger) as lg:
        marks = [r["kind"] for r in lg.query("SELECT kind FROM run_marks WHERE run_id = 'lossy' ORDER BY id")]
        assert outcomes(lg, "lossy") == {IDS[0]: "pending"}  # not infra_failed: resumable as it was
    assert marks == ["started", "aborted"]


def test_a_restart_cancels_the_tasks_it_abandons_and_their_commands_die_on_the_worker(
    tmp_path: Path, cluster: RayCluster
) -> None:
    """A server restart ends the attempts in flight (``server_restarted``) while their tasks still
    run on the cluster: each task is cancelled and its commands killed, and the run goes on."""
    marker = f"wedgewatch-ray-abandoned-{uuid.uuid4().hex}"
    cfg = load_config(on_ray(_command_agent_config(tmp_path, marker, per_attempt=True), cluster.address))
    cfg.watchdog.on_wedge = "fail"  # a restart ends its attempts only without resume
    seen: dict[str, Any] = {}

    def running(attempt_id: str) -> bool:
        return bool(_processes_with(f"{marker}-{attempt_id}"))

    def on_context(ctx: RunContext) -> None:
        main = asyncio.current_task()
        assert main is not None

        async def restart_then_stop() -> None:
            try:
                await eventually_async(
                    lambda: len(ctx.inflight) == 2 and all(running(a) for a in ctx.inflight), 120, 0.1
                )
                first = seen["first"] = sorted(ctx.inflight)
                await ctx.server.members[0].restart("test")  # type: ignore[attr-defined]
                # Their agents would sleep 300 s more: only the cancelled tasks can have killed them.
                await eventually_async(
                    lambda: not any(running(a) for a in first), 20, 0.1, "abandoned commands killed"
                )
                seen["then"] = await eventually_async(
                    lambda: [a for a in ctx.inflight if a not in first and running(a)],
                    120,
                    0.1,
                    "new attempts",
                )
            finally:
                main.cancel()  # as Ctrl-C: the run stops, whatever the checks found

        seen["task"] = asyncio.get_running_loop().create_task(restart_then_stop())

    with pytest.raises(KeyboardInterrupt):
        runner_main.start(cfg, run_id="stop", on_context=on_context)
    assert seen["task"].exception() is None
    rows = end_rows(tmp_path / "c.sqlite", "stop")
    assert {a: (rows[a]["status"], rows[a]["reason"]) for a in seen["first"]} == dict.fromkeys(
        seen["first"], ("api_error", "server_restarted")
    )
    assert all((rows[a]["status"], rows[a]["reason"]) == ("interrupted", "run_stopped") for a in seen["then"])
    eventually(lambda: not _processes_with(marker), 15, what="no agent command left running")


def _command_agent_config(tmp_path: Path, marker: str, per_attempt: bool = False) -> Path:
    """Two instances whose agent is a command that would sleep 300 s in the background: only the
    run's stop can end them. ``per_attempt``: each attempt's command carries its attempt id."""
    if per_attempt:
        marker += "-{attempt_id}"
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f"""
[server]
log_dir = "{tmp_path / "logs"}"
[agent]
name = "command"
command = ["bash", "-c", "python3 -c 'import time; time.sleep(300)' {marker} & wait", "{marker}"]
[suite]
ids = {json.dumps(IDS[:2])}
[run]
concurrency = 2
ledger = "{tmp_path / "c.sqlite"}"
workdir = "{tmp_path / "work"}"
time_scale = 20.0
"""
    )
    return cfg


def _stop_a_run(
    cfg: Path, sig: signal.Signals
) -> tuple[subprocess.CompletedProcess[str], set[tuple[int, int]]]:
    """Start ``wedgewatch run cfg``, signal it once both attempts' commands run; its exit and every
    process it had under it at that moment."""
    marker = cfg.read_text().split("time.sleep(300)' ")[1].split(" ")[0]
    proc = subprocess.Popen(
        [sys.executable, "-m", "wedgewatch", "run", str(cfg), "--run-id", "stop"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(lambda: len(_processes_with(marker)) >= 4, 120, what="both attempts' commands running")
        under = descendants(proc.pid)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:  # a failed check: let the runner stop what it started
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for pid in _processes_with(marker):
            os.kill(pid, signal.SIGKILL)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err), under


def _check_stopped(tmp_path: Path) -> None:
    with Ledger(tmp_path / "c.sqlite") as lg:
        marks = [r["kind"] for r in lg.query("SELECT kind FROM run_marks ORDER BY id")]
        ends = lg.query("SELECT status, reason FROM attempt_view WHERE run_id = 'stop'")
        lives = lg.query("SELECT end_reason FROM server_life_view")
    assert marks == ["started", "interrupted"]
    assert [(e["status"], e["reason"]) for e in ends] == [("interrupted", "run_stopped")] * 2
    assert all(life["end_reason"] is not None for life in lives)


def test_ctrl_c_stops_the_local_ray_and_every_command_of_its_attempts(tmp_path: Path) -> None:
    marker = f"wedgewatch-ray-orphan-{uuid.uuid4().hex}"
    done, under = _stop_a_run(on_ray(_command_agent_config(tmp_path, marker)), signal.SIGINT)
    assert done.returncode == 130, done.stderr
    _check_stopped(tmp_path)
    # The local Ray was the run's: its GCS, raylet, workers (and the commands under them) go.
    assert len(under) >= 8, under  # runner, simulator, GCS, raylet, 2 workers, 2 commands at least
    eventually(lambda: not _processes_with(marker), 15, what="no agent command left running")
    eventually(lambda: not still_running(under), 30, what="no process of the run left running")


def test_sigterm_on_a_joined_cluster_cancels_the_attempts_and_leaves_the_cluster(
    tmp_path: Path, cluster: RayCluster
) -> None:
    before = cluster.processes()
    marker = f"wedgewatch-ray-orphan-{uuid.uuid4().hex}"
    done, _ = _stop_a_run(on_ray(_command_agent_config(tmp_path, marker), cluster.address), signal.SIGTERM)
    assert done.returncode == 130, done.stderr
    _check_stopped(tmp_path)
    eventually(lambda: not _processes_with(marker), 15, what="no agent command left running")
    assert still_running(before) == before  # the cluster was joined: it runs on


def test_without_ray_the_local_executor_runs_and_the_ray_executor_is_one_line(tmp_path: Path) -> None:
    """Ray uninstalled, as far as Python can tell (``sys.modules['ray'] = None`` makes every
    ``import ray`` fail): a run on the local executor never imports it, one on Ray says which extra
    to install, in one line, before anything is written."""
    blocked = "import sys; sys.modules['ray'] = None; from wedgewatch.cli import main; sys.argv[0] = 'wedgewatch'; main()"
    cfg = write_config(tmp_path, ids=IDS[:1], concurrency=1)
    local = subprocess.run(
        [sys.executable, "-c", blocked, "run", str(cfg), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert local.returncode == 0, local.stderr
    assert json.loads(local.stdout)["outcomes"]["resolved"] == 1
    cfg2 = on_ray(write_config(tmp_path, ids=IDS[:1], concurrency=1, name="r"))
    missing = subprocess.run(
        [sys.executable, "-c", blocked, "run", str(cfg2)], capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 2
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and "'ray' extra" in lines[0] and "pip install 'wedgewatch[ray]'" in lines[0], (
        lines
    )
    assert not (tmp_path / "r.sqlite").exists()


def test_a_dead_owner_takes_its_listed_command_groups_with_it(tmp_path: Path) -> None:
    """The watcher a Ray attempt runs beside (sandbox/reaper.py): the owner SIGKILLed, as a Ray
    worker is by a forced cancel, its listed commands die; a released one is not touched."""
    marker = f"wedgewatch-reaper-{uuid.uuid4().hex}"
    owner_code = """
import os, time
from wedgewatch.sandbox import groups
from wedgewatch.sandbox.reaper import Reaper
own = groups.Groups(watcher=Reaper())
marker = os.environ["MARKER"]  # not in this process's own command line
own.spawn(["sh", "-c", "sleep 300; true", marker + "-listed"])
released = own.spawn(["sh", "-c", "sleep 300; true", marker + "-released"])
own.release(released.pid)
print("ready", flush=True)
time.sleep(300)
"""
    owner = subprocess.Popen(
        [sys.executable, "-c", owner_code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "MARKER": marker},
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "ready"
        # Both running before the kill (seen once under load: one not yet found in /proc's scan).
        eventually(
            lambda: _processes_with(f"{marker}-listed") and _processes_with(f"{marker}-released"),
            10,
            what="both commands running",
        )
        owner.kill()
        owner.wait(10)
        eventually(lambda: not _processes_with(f"{marker}-listed"), 10, what="the listed command killed")
        assert _processes_with(f"{marker}-released")  # released: its owner's business, not the watcher's
    finally:
        if owner.poll() is None:
            owner.kill()
        for pid in _processes_with(marker):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_a_cluster_that_cannot_be_joined_stops_the_run_with_one_line_naming_it(tmp_path: Path) -> None:
    """Nothing listens at the address: the run is aborted before any attempt, with one line that
    says what failed (and what a token-authenticated cluster needs), and can be resumed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"  # free: nothing listens there
    cfg = on_ray(write_config(tmp_path, ids=IDS[:1], concurrency=1), address)
    # Ray's own patience when joining (80 s here: retries of 5 s connection timeouts) cut to a few
    # seconds, with Ray's own settings.
    env = {
        **os.environ,
        "RAY_gcs_server_port_wait_time_s": "1",
        "RAY_gcs_rpc_server_connect_timeout_s": "1",
        "RAY_py_gcs_connect_timeout_s": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "wedgewatch", "run", str(cfg), "--run-id", "nojoin"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 1, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("wedgewatch: error:")]
    assert len(said) == 1 and f"joining the Ray cluster at {address} failed" in said[0], done.stderr
    assert "RAY_AUTH_MODE=token" in said[0]
    with Ledger(tmp_path / "c.sqlite") as lg:
        marks = [
            (r["kind"], json.loads(r["detail_json"]).get("error", ""))
            for r in lg.query("SELECT * FROM run_marks")
        ]
        attempts = lg.query("SELECT COUNT(*) FROM attempts")[0][0]
    assert [kind for kind, _ in marks] == ["started", "aborted"] and "ExecutorError" in marks[1][1]
    assert attempts == 0
