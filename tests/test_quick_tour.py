"""README's quick tour, walked as written on the simulator (issue 39), so the README cannot drift.

The test reads the tour's code block from README.md. Its commands, in order, must be exactly the
walk's (``WALK``): a command added, changed or removed in the block without the test knowing it
fails here, before anything runs. Each is then run as a shell line in one working directory, in
the README's order, with the test's virtual environment first on PATH (it stands for the
README's ``.venv``), and checked for what the README says it does.

Walked for real: the default ``wedgewatch demo`` (the session's one default demo, run here as
written and shared with tests/test_demo.py: same xdist group); ``sim`` and ``proxy`` (a reply
through the proxy, a fault the ``keywords`` scenario names); ``config --example > run.toml``;
``serve`` (a reply through it; its simulator runs at the example's ``time_scale = 20``);
``view`` beside it (its page shows serve's server life);
``suite --out``; ``wrap`` around docs/examples/my_eval.py (its simulator at ``time_scale`` 20
too); ``audit`` (the published score counts the submitted instances); ``report`` of the wrapped
run; ``run`` of the example config (20 bundled instances), its ``--resume``, ``report``,
``ledger check`` and both ``export`` formats; ``compare`` of the demo's two arms and of counts;
``lives``; ``scan`` of the demo's naive results (its infra_failed count is the file's);
``plan``. ``sim``, ``proxy``, ``serve`` and ``view`` run until Ctrl-C, as the README says: each
is started and checked, and stopped with SIGINT (each must exit 0) once the next that needs it
is done. The proxy's stall deadlines (60 s, 20 s) are not
waited out here (tests/test_proxy*.py hold them on a manual clock).

Checked more cheaply: ``demo --arms naive,guarded,story-fix,fresh-naive --seeds 3 --lora`` (about
six minutes) by the demo command's own argument parser and arm names; the llama.cpp launcher by
its argument parser; the vLLM launcher's command and model name, with no engine started (the
real engines are tests/test_llamacpp*.py's and tests/test_vllm_*.py's).

Ports: the README's 8000, 8100 and 8200 become free ports in the commands run (the only change
made to a command's text), so the walk never meets another test's server; the placeholders
``WRAP_ID``, ``RUN_ID``, ``RUN_A`` and ``RUN_B`` become the ids the earlier commands printed.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import socket
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, DefaultDemo
from wedgewatch.testing import eventually

SHARES_THE_DEMO = pytest.mark.xdist_group("default-demo")
README_PORTS = ("8000", "8100", "8200")


def tour_commands() -> list[str]:
    """The tour block's commands, in order: comments and blank lines out, a trailing ``  # ...``
    cut off."""
    section = (ROOT / "README.md").read_text().split("## A quick tour", 1)[1]
    found = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert found, "README.md: the quick tour has no ```sh block"
    out = []
    for line in found.group(1).replace("\\\n", " ").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(re.split(r"\s+#\s", line)[0].strip())
    return out


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read() or b"{}")


def _chat(base: str, text: str) -> tuple[int, dict[str, str], dict[str, Any]]:
    messages = [{"role": "user", "content": text}]
    return _post(f"{base}/v1/chat/completions", {"model": "sim-model", "messages": messages, "max_tokens": 8})


@dataclass
class Tour:
    """The walk's working directory and what its commands printed that later commands use."""

    cwd: Path
    demo: DefaultDemo
    ports: dict[str, str] = field(default_factory=lambda: {p: _free_port() for p in README_PORTS})
    ids: dict[str, str] = field(default_factory=dict)
    running: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """``. .venv/bin/activate``: the tests' environment first on PATH."""
        bin_dir = str(Path(sys.executable).parent)
        return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": sys.prefix}

    def expand(self, command: str) -> str:
        for port, mapped in self.ports.items():
            command = re.sub(rf"\b{port}\b", mapped, command)
        for name, value in self.ids.items():
            command = re.sub(rf"\b{name}\b", value, command)
        return command

    def sh(self, command: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["bash", "-c", self.expand(command)],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == code, f"`{command}` exited {done.returncode}:\n{done.stderr[-3000:]}"
        return done

    def start(self, command: str, says: str = "listening on ") -> str:
        """A command that runs until Ctrl-C: started, and the URL of its first line (``says URL``) read."""
        log = (self.cwd / f"started-{len(self.running)}.log").open("w")
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {self.expand(command)}"],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
        self.running.append(proc)
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(300), f"`{command}` printed nothing"
        line = proc.stdout.readline().strip()
        assert line.startswith(says), f"`{command}`: {line!r}; {Path(log.name).read_text()}"
        return line.removeprefix(says).rstrip("/")

    def ctrl_c(self) -> None:
        """Ctrl-C to every command still running: each stops cleanly."""
        for proc in self.running:
            os.killpg(proc.pid, signal.SIGINT)
            assert proc.wait(timeout=120) == 0, f"{proc.args!r}: exit {proc.returncode} on Ctrl-C"
        self.running.clear()

    def kill_all(self) -> None:
        for proc in self.running:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)

    def life_argv(self, run_id: str) -> list[str]:
        with sqlite3.connect(self.cwd / "wedgewatch.sqlite") as db:
            (argv,) = db.execute("SELECT argv_json FROM server_lives WHERE run_id = ?", (run_id,)).fetchone()
        return list(json.loads(argv))


def _scaled(argv: list[str]) -> str:
    return argv[argv.index("--time-scale") + 1]


# --- the steps, in the README's order ------------------------------------------------------------


def activate(t: Tour, command: str) -> None:
    # The environment the tests run in stands for .venv: Tour.env puts its bin first on PATH.
    assert (Path(sys.prefix) / "bin" / "activate").is_file(), "the tests run in a virtual environment"
    assert (Path(sys.executable).parent / "wedgewatch").is_file(), "it has the wedgewatch command"
    (t.cwd / "docs").symlink_to(ROOT / "docs")  # the walk's directory stands for the checkout


def demo(t: Tour, command: str) -> None:
    assert t.demo.command == command, "the shared default demo ran the README's command"
    out, err = t.demo.stdout, t.demo.stderr
    assert "The story's run, replayed" in out and "true resolved" in out and "published score" in out
    for arm in ("naive", "guarded"):
        assert re.search(rf"^{arm}, seed 1 \(\d of 2\): run demo-{arm}-s1-", err, re.MULTILINE), err
        assert re.search(rf"^{arm}, seed 1: done in \d+ s: published ", err, re.MULTILINE), err
    hint = re.search(r"^side by side: wedgewatch compare --ledger (\S+) (\S+) (\S+)$", out, re.MULTILINE)
    assert hint and hint.group(1) == "wedgewatch-demo/ledger.sqlite", out
    t.ids["RUN_A"], t.ids["RUN_B"] = hint.group(2), hint.group(3)
    assert t.ids["RUN_A"].startswith("demo-naive-s1-") and t.ids["RUN_B"].startswith("demo-guarded-s1-")


def demo_more(t: Tour, command: str) -> None:
    import typer.main

    from wedgewatch.cli import _load_commands
    from wedgewatch.cli._app import app
    from wedgewatch.demo.arms import parse_arms

    _load_commands(["demo"])
    words = command.split()[2:]
    cmd = typer.main.get_command(app).commands["demo"]  # type: ignore[attr-defined]
    params = cmd.make_context("demo", words).params
    assert parse_arms(params["arms"]) == ["naive", "guarded", "story-fix", "fresh-naive"]
    assert params["seeds"] == 3 and params["lora"] is True


def sim(t: Tour, command: str) -> None:
    url = t.start(command)
    assert url.endswith(f":{t.ports['8000']}")
    assert _chat(url, "Say hello.")[0] == 200
    status, _, body = _chat(url, "Please HTTP-503 now.")  # a keyword picks the fault
    assert status == 503, body


def proxy(t: Tour, command: str) -> None:
    url = t.start(command)
    assert url.endswith(f":{t.ports['8100']}")
    status, _, body = _chat(url, "Say hello through the proxy.")
    assert status == 200 and body["choices"][0]["message"]["content"], body
    records = t.cwd / ".wedgewatch" / "proxy-requests.jsonl"  # the proxy records every request

    def recorded() -> bool:
        lines = records.read_text().splitlines() if records.exists() else []
        return any(json.loads(x).get("outcome") == "ok" for x in lines)

    eventually(recorded, what="the request's record")
    t.ctrl_c()  # sim and proxy: Ctrl-C in their terminals


def config(t: Tour, command: str) -> None:
    from wedgewatch.config import load_config

    t.sh(command)
    cfg = load_config(t.cwd / "run.toml")
    assert cfg.server.profile == "sim" and cfg.run.time_scale == 20


def serve(t: Tour, command: str) -> None:
    url = t.start(command)
    assert url.endswith(f":{t.ports['8200']}")
    status, _, body = _chat(url, "Say hello to the supervised server.")
    assert status == 200, body
    with sqlite3.connect(t.cwd / "wedgewatch.sqlite") as db:
        (argv,) = db.execute("SELECT argv_json FROM server_lives ORDER BY started_at DESC").fetchone()
    assert _scaled(json.loads(argv)) == "20.0", "serve runs the simulator at the config's time_scale"


def view(t: Tour, command: str) -> None:
    url = t.start(command, says="view on ")  # beside serve, as the README has it
    with sqlite3.connect(t.cwd / "wedgewatch.sqlite") as db:
        (life,) = db.execute("SELECT life_id FROM server_lives ORDER BY started_at DESC").fetchone()
    with urllib.request.urlopen(url + "/", timeout=120) as page:
        assert page.status == 200 and life in page.read().decode(), "the page shows serve's server life"
    t.ctrl_c()  # serve and view


def suite(t: Tour, command: str) -> None:
    t.sh(command)
    lines = (t.cwd / "suite.jsonl").read_text().splitlines()
    assert len(lines) == 20 and all("problem_statement" in json.loads(x) for x in lines)


def wrap(t: Tour, command: str) -> None:
    done = t.sh(command)
    found = re.search(r"harness run (wrap-\S+), base URL", done.stderr)
    assert found, done.stderr
    t.ids["WRAP_ID"] = found.group(1)
    rows = [json.loads(x) for x in (t.cwd / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 20 and {r["outcome"] for r in rows} == {"submitted"}
    assert _scaled(t.life_argv(t.ids["WRAP_ID"])) == "20.0", "wrap runs the simulator at time_scale"


def audit(t: Tour, command: str) -> None:
    out = t.sh(command).stdout
    assert "published score (submitted): 20/20 " in out, out  # what the file says, not 0/20
    assert "honest score (submitted): 20/20 " in out and "infra_failed 0" in out
    assert (t.cwd / "rerun.txt").read_text() == "", "the healthy server broke no instance"


def report_wrap(t: Tour, command: str) -> None:
    out = t.sh(command).stdout
    assert out.startswith(f"wrapped run {t.ids['WRAP_ID']} ") and "requests 20: ok 20" in out


def run(t: Tour, command: str) -> None:
    out = t.sh(command).stdout
    found = re.search(r"export: wedgewatch export (\S+) --ledger wedgewatch.sqlite", out)
    assert found, out
    t.ids["RUN_ID"] = found.group(1)
    assert "infra_failed" in out  # beside the score
    with sqlite3.connect(t.cwd / "wedgewatch.sqlite") as db:
        outcomes = db.execute(
            "SELECT outcome, COUNT(*) FROM instance_outcomes WHERE run_id = ? GROUP BY outcome",
            (found.group(1),),
        ).fetchall()
    # The example config runs as it is: the simulator plays a model that solves every bundled instance.
    assert outcomes == [("resolved", 20)], outcomes


def resume(t: Tour, command: str) -> None:
    done = t.sh(command)
    assert t.ids["RUN_ID"] in done.stdout + done.stderr


def report_run(t: Tour, command: str) -> None:
    out = t.sh(command).stdout
    assert t.ids["RUN_ID"] in out and "infra_failed" in out


def ledger_check(t: Tour, command: str) -> None:
    assert "ok" in t.sh(command).stdout


def export_swebench(t: Tour, command: str) -> None:
    rows = [json.loads(x) for x in t.sh(command).stdout.splitlines()]
    assert len(rows) == 20 and all(
        set(r) >= {"instance_id", "model_name_or_path", "model_patch"} for r in rows
    )


def export_results(t: Tour, command: str) -> None:
    rows = [json.loads(x) for x in t.sh(command).stdout.splitlines()]
    assert len(rows) == 20 and all({"api_error", "early_stop", "attempts"} <= set(r) for r in rows)


def compare_runs(t: Tour, command: str) -> None:
    out = t.sh(command).stdout
    assert t.ids["RUN_A"] in out and t.ids["RUN_B"] in out


def compare_counts(t: Tour, command: str) -> None:
    assert "Fisher" in t.sh(command).stdout


def lives(t: Tour, command: str) -> None:
    assert t.sh(command).stdout.strip()


def scan(t: Tour, command: str) -> None:
    out = t.sh(command).stdout
    results = (t.cwd / "wedgewatch-demo" / "results-naive-s1.jsonl").read_text().splitlines()
    infra = sum(json.loads(x)["outcome"] == "infra_failed" for x in results)
    assert infra >= 1, "the naive arm hung (tests/test_demo.py)"
    assert f"infra_failed {infra} (the file's own, apart)" in out, out  # not 0 beside them


def plan(t: Tour, command: str) -> None:
    t.sh(command)
    assert any((t.cwd / "plan").iterdir())


def llamacpp(t: Tour, command: str) -> None:
    from wedgewatch.launchers import llamacpp as launcher

    args = launcher.build_parser().parse_args(command.split()[3:])
    assert args.port == 0


def vllm(t: Tour, command: str) -> None:
    from wedgewatch.launchers import models

    words = command.split()[3:]
    assert words[0] == "serve" and words[1] == models.BUNDLED_MODEL and "--enforce-eager" in words


WALK: list[tuple[str, Callable[[Tour, str], None]]] = [
    (". .venv/bin/activate", activate),
    ("wedgewatch demo", demo),
    ("wedgewatch demo --arms naive,guarded,story-fix,fresh-naive --seeds 3 --lora", demo_more),
    ("wedgewatch sim --port 8000 --scenario keywords", sim),
    (
        "wedgewatch proxy --upstream http://127.0.0.1:8000 --port 8100 --ttft-timeout 60 --stall-timeout 20",
        proxy,
    ),
    ("wedgewatch config --example > run.toml", config),
    ("wedgewatch serve run.toml --port 8200", serve),
    ("wedgewatch view wedgewatch.sqlite", view),
    ("wedgewatch suite --out suite.jsonl", suite),
    (
        "wedgewatch wrap run.toml -- python docs/examples/my_eval.py --base-url {base_url} suite.jsonl results.jsonl",
        wrap,
    ),
    ("wedgewatch audit results.jsonl --suite suite.jsonl --rerun-out rerun.txt", audit),
    ("wedgewatch report WRAP_ID", report_wrap),
    ("wedgewatch run run.toml", run),
    ("wedgewatch run --resume RUN_ID --ledger wedgewatch.sqlite", resume),
    ("wedgewatch report RUN_ID", report_run),
    ("wedgewatch ledger check wedgewatch.sqlite", ledger_check),
    ("wedgewatch export RUN_ID --format swebench", export_swebench),
    ("wedgewatch export RUN_ID --format results", export_results),
    ("wedgewatch compare --ledger wedgewatch-demo/ledger.sqlite RUN_A RUN_B", compare_runs),
    ("wedgewatch compare --counts 15/15 0/12", compare_counts),
    ("wedgewatch lives RUN_ID --by instances --risk 0.05", lives),
    ("wedgewatch scan wedgewatch-demo/results-naive-s1.jsonl", scan),
    ("wedgewatch plan --out plan/", plan),
    ("python -m wedgewatch.launchers.llamacpp --port 0", llamacpp),
    ("python -m wedgewatch.launchers.vllm serve gemma3-270m --port 8000 --enforce-eager", vllm),
]


def test_the_walk_knows_every_command_of_the_tour_in_its_order() -> None:
    assert tour_commands() == [command for command, _ in WALK]


@pytest.mark.long
@pytest.mark.timeout(1500)
@SHARES_THE_DEMO
def test_the_quick_tour_does_what_the_readme_says(default_demo: DefaultDemo) -> None:
    assert tour_commands() == [command for command, _ in WALK], "the walk is stale: see the test above"
    tour = Tour(default_demo.cwd, default_demo)
    try:
        for command, step in WALK:
            step(tour, command)
    finally:
        tour.kill_all()
