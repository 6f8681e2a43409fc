"""A pool of servers (``[[servers]]``): real simulators, the real proxy, supervisors and runner.

The simulator's swe policy decides each instance's outcome from (instance, seed, skill), so a run
on one server and a run on a pool must give the same outcomes whatever server served what; the
pool's job is that a wedge on one member costs only that member a restart.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import RunningServer, launch
from ledger_helpers import outcomes
from wedgewatch.analysis.summary import summarise
from wedgewatch.base.vocab import MODEL_OUTCOMES
from wedgewatch.config import load_config
from wedgewatch.ledger import Ledger, checks
from wedgewatch.runner import entry as runner_main
from wedgewatch.suites import load_bundled

pytestmark = pytest.mark.timeout(300)

IDS = [i["instance_id"] for i in load_bundled()]
# Eight instances (about 60 requests at concurrency 4): the wedging member, serving a third of
# them, wedges and is restarted (two lives in each run checked). All twenty cost 2.5 times the CPU
# for the same assertions.
POOL_IDS = IDS[:8]

# The 6th generation request each life of the wedging member serves stops its whole engine; a
# restarted life is a new process, so it wedges again at its own 6th request.
WEDGE_AT_6 = """
[[fault]]
when.nth = 6
times = 1
action = "wedge"
after_tokens = 2
"""

COMMON = """
scrape_interval = 0.2
log_dir = "{logs}"
[{table}.warmup]
count = 1
"""


def _server(table: str, tmp_path: Path, scenario: Path, name: str | None = None) -> str:
    head = f'[{table}]\nprofile = "sim"\nscenario = "{scenario}"\nargs = ["--policy", "swe"]\n'
    if name is not None:
        head += f'name = "{name}"\n'
    return head + COMMON.format(logs=tmp_path / "logs", table=table)


def write_config(tmp_path: Path, name: str, servers: list[str], ids: list[str]) -> Path:
    """``servers``: one scenario text per member; one entry writes ``[server]``, more write a pool."""
    body = []
    for n, text in enumerate(servers):
        scenario = tmp_path / f"{name}-scenario{n}.toml"
        scenario.write_text(f"[policy]\nskill = 0.6\n{text}")
        table = "server" if len(servers) == 1 else "servers"
        body.append(_server(table, tmp_path, scenario).replace("[servers]", "[[servers]]", 1))
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(
        "\n".join(body)
        + f"""
[agent]
step_limit = 8
[suite]
ids = {json.dumps(ids)}
[run]
concurrency = 4
attempts = 3
ledger = "{tmp_path / f"{name}.sqlite"}"
workdir = "{tmp_path / "work" / name}"
time_scale = 20.0
seed = 3
"""
    )
    return cfg


@pytest.fixture(scope="module")
def one_server(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("one")
    cfg = load_config(write_config(tmp, "one", [""], POOL_IDS))
    ex = runner_main.start(cfg, run_id="one")
    assert ex.end_mark == "finished"
    with Ledger(cfg.run.ledger) as lg:
        return outcomes(lg, "one")


@pytest.mark.long
def test_a_wedge_on_one_member_restarts_only_it_and_the_outcomes_equal_one_servers(
    tmp_path: Path, one_server: dict[str, str]
) -> None:
    cfg = load_config(write_config(tmp_path, "pool", ["", WEDGE_AT_6, ""], POOL_IDS))
    assert [m.name for m in cfg.members()] == ["s0", "s1", "s2"]
    ex = runner_main.start(cfg, run_id="pool")
    assert ex.end_mark == "finished"
    with Ledger(cfg.run.ledger) as lg:
        got = outcomes(lg, "pool")
        lives = lg.query(
            "SELECT life_id, member, start_reason, end_reason FROM server_life_view ORDER BY started_at"
        )
        wedges = lg.query("SELECT life_id FROM events WHERE kind = 'wedge'")
        attempts = lg.query("SELECT attempt_id, life_id FROM attempts WHERE run_id = 'pool'")
        requests = lg.query(
            "SELECT q.attempt_id, q.life_id, q.outcome FROM requests q JOIN attempts a USING (attempt_id) "
            "WHERE a.run_id = 'pool' ORDER BY q.started_at"
        )
        ended = lg.query("SELECT status, reason, life_id FROM attempt_ends")
        assert checks.problems(lg) == []
        summary = summarise(lg, "pool")
        by_member = summary["server"]["by_member"]
    assert by_member["s0"] == {"lives": 1, "restarts": 0} == by_member["s2"]
    assert by_member["s1"]["lives"] == by_member["s1"]["restarts"] + 1 >= 2  # what `report` shows

    # Every instance ends on the model's side, as on one server with the same seed.
    assert len(got) == len(POOL_IDS) and set(got.values()) <= set(MODEL_OUTCOMES)
    assert got == one_server

    # Only the wedging member was restarted; the others kept their first life all run long.
    member_of = {r["life_id"]: r["member"] for r in lives}
    by_member: dict[str, list[Any]] = {}
    for r in lives:
        by_member.setdefault(r["member"], []).append(r)
    assert len(by_member["s0"]) == 1 and len(by_member["s2"]) == 1
    assert len(by_member["s1"]) >= 2
    assert all(r["start_reason"] in ("run_start", "wedge") for r in by_member["s1"])
    assert wedges and {member_of[w["life_id"]] for w in wedges} == {"s1"}

    # The wedge cost no attempt: the requests in flight on s1's wedged life were resumed on
    # another life (on_wedge = "resume", the default), and no attempt ended for the restart.
    assert not [e for e in ended if e["reason"] == "server_restarted"]
    resumed = [q for q in requests if q["outcome"] == "resumed"]
    assert resumed and {member_of[q["life_id"]] for q in resumed} == {"s1"}
    assert summary["resumed"] == len(resumed)  # what `report` and `compare` show

    # Work was spread over the members, and each attempt's requests stayed on one life, but for
    # the resume that moved them off the wedged one.
    served = {member_of[a["life_id"]] for a in attempts}
    assert served == {"s0", "s1", "s2"}
    life_of = {a["attempt_id"]: a["life_id"] for a in attempts}
    moved_by = {q["attempt_id"] for q in resumed}
    moved = [
        q for q in requests if q["life_id"] != life_of[q["attempt_id"]] and q["attempt_id"] not in moved_by
    ]
    assert moved == [], f"requests of an attempt left its server: {moved[:3]}"


def _post(url: str, token: str | None, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=json.dumps(body or {}).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        doc: dict[str, Any] = json.loads(resp.read())
        return doc


def _stop(served: RunningServer) -> None:
    """SIGTERM, as Ctrl-C would: the serve stops its server's process group (its own session,
    which a SIGKILL of the serve's group would leave running), then exits."""
    served.proc.send_signal(signal.SIGTERM)
    try:
        served.proc.wait(timeout=60)
    finally:
        served.stop()  # whatever is left, should the serve not exit


def _serve(tmp_path: Path, name: str, token: str | None) -> RunningServer:
    scenario = tmp_path / f"{name}.scenario.toml"
    scenario.write_text("[policy]\nskill = 1.0\n")
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(
        _server("server", tmp_path, scenario, name="remote")
        + f'[run]\nledger = "{tmp_path / f"{name}.sqlite"}"\n'
    )
    env_var = f"WW_TEST_TOKEN_{name.upper()}"
    if token is not None:
        os.environ[env_var] = token
    try:
        return launch(
            [
                sys.executable,
                "-m",
                "wedgewatch",
                "serve",
                str(cfg),
                "--port",
                "0",
                "--restart-token-env",
                env_var,
            ],
            tmp_path / f"{name}.log",
            timeout=60,
        )
    finally:
        os.environ.pop(env_var, None)


def test_the_restart_endpoint_refuses_without_the_token_and_restarts_with_it(tmp_path: Path) -> None:
    served = _serve(tmp_path, "a", token="s3cret-token")
    try:
        before = _get(served.url + "/wedgewatch/servers")["servers"]
        assert [s["member"] for s in before] == ["remote"] and before[0]["ready"] is True
        for token in (None, "wrong", "s3cret-token-but-longer"):
            status, doc = _post(served.url + "/wedgewatch/restart", token)
            assert status == 401 and doc["error"]["code"] == "unauthorized"
        assert _get(served.url + "/wedgewatch/servers")["servers"][0]["life_id"] == before[0]["life_id"]
        status, doc = _post(served.url + "/wedgewatch/restart", "s3cret-token", {"member": "nobody"})
        assert status == 404 and "(members: remote)" in doc["error"]["message"]
        status, doc = _post(served.url + "/wedgewatch/restart", "s3cret-token")
        assert status == 200
        after = doc["restarted"][0]
        assert after["ready"] is True and after["life_id"] not in (None, before[0]["life_id"])
    finally:
        _stop(served)
    with Ledger(tmp_path / "a.sqlite") as lg:
        reasons = [r[0] for r in lg.query("SELECT start_reason FROM server_lives ORDER BY started_at")]
        unended = lg.query("SELECT life_id FROM server_life_view WHERE ended_at IS NULL")
        logged = (tmp_path / "a.log").read_text() + json.dumps(
            [list(r) for r in lg.query("SELECT * FROM events")]
        )
    assert reasons == ["run_start", "remote_restart"]
    assert unended == []  # the serve stopped its server when it was stopped
    assert "s3cret-token" not in logged  # the token is in no log and no ledger row


def test_without_a_token_the_endpoint_refuses_every_restart(tmp_path: Path) -> None:
    served = _serve(tmp_path, "b", token=None)
    try:
        status, doc = _post(served.url + "/wedgewatch/restart", "anything")
        assert status == 403 and doc["error"]["code"] == "restart_disabled"
    finally:
        _stop(served)


@pytest.mark.long
def test_a_pool_member_on_another_host_is_restarted_through_its_endpoint(tmp_path: Path) -> None:
    """The member is a `wedgewatch serve` (on loopback here): a fresh run restarts it with a POST,
    no shell on its host, and runs its instances through it."""
    served = _serve(tmp_path, "c", token="tok-c")
    try:
        cfg_path = tmp_path / "remote-pool.toml"
        cfg_path.write_text(
            f"""
[[servers]]
name = "far"
profile = "external"
url = "{served.url}"
restart_url = "{served.url}/wedgewatch/restart"
restart_token_env = "WW_TEST_POOL_TOKEN"
scrape_interval = 0.2
log_dir = "{tmp_path / "logs"}"
[agent]
step_limit = 8
[suite]
ids = {json.dumps(IDS[:2])}
[run]
concurrency = 2
ledger = "{tmp_path / "pool.sqlite"}"
workdir = "{tmp_path / "work"}"
time_scale = 20.0
"""
        )
        env = {**os.environ, "WW_TEST_POOL_TOKEN": "tok-c"}
        r = subprocess.run(
            [sys.executable, "-m", "wedgewatch", "run", str(cfg_path), "--run-id", "far", "--json"],
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads(r.stdout)["outcomes"]["resolved"] == 2
    finally:
        _stop(served)
    with Ledger(tmp_path / "c.sqlite") as lg:
        remote = [r[0] for r in lg.query("SELECT start_reason FROM server_lives ORDER BY started_at")]
    with Ledger(tmp_path / "pool.sqlite") as lg:
        local = lg.query("SELECT member, start_reason FROM server_lives")
    assert remote == ["run_start", "remote_restart"]  # the fresh run's restart, by POST
    assert [tuple(r) for r in local] == [("far", "run_start")]
