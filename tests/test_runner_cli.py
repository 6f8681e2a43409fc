"""The runner's CLI surface that needs no server: config --example/--schema/--check, bad fields,
and the live display's rendering."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

from ledger_helpers import add_attempt, make_run
from wedgewatch.base.protocols import LifeInfo
from wedgewatch.config import Config
from wedgewatch.ledger import Ledger
from wedgewatch.runner.progress import render
from wedgewatch.runner.state import Counters, RunContext
from wedgewatch.testing import FixedLife


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", *args], capture_output=True, text=True, timeout=60
    )


def test_example_is_commented_valid_and_uses_the_simulator_the_bash_agent_and_the_bundled_suite() -> None:
    proc = _cli("config", "--example")
    assert proc.returncode == 0
    assert sum(1 for ln in proc.stdout.splitlines() if "#" in ln) >= 20
    cfg = Config.model_validate(tomllib.loads(proc.stdout))
    assert (cfg.server.profile, cfg.agent.name) == ("sim", "bash")
    assert cfg.suite.path is None and cfg.suite.dataset is None
    assert cfg.server.args[:2] == ["--policy", "swe"]


def test_schema_has_every_section_with_descriptions() -> None:
    proc = _cli("config", "--schema")
    schema = json.loads(proc.stdout)
    assert set(schema["properties"]) == {"server", "servers", "watchdog", "agent", "suite", "run", "sandbox"}
    run = schema["$defs"]["RunConfig"]["properties"]
    assert run["concurrency"]["default"] == 4 and "story" in run["concurrency"]["description"]
    assert all("description" in f for f in run.values())


def test_check_and_bad_field_exit_2_naming_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[run]\nconcurrency = 0\n")
    for args in (["config", "--check", str(bad)], ["run", str(bad)]):
        proc = _cli(*args)
        assert proc.returncode == 2
        assert f"{bad}: run.concurrency" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    good = tmp_path / "good.toml"
    good.write_text("[run]\nconcurrency = 2\n")
    assert _cli("config", "--check", str(good)).returncode == 0
    assert _cli("config").returncode == 2  # exactly one of the three


def test_a_bad_field_only_the_servers_profile_can_judge_is_exit_2_before_any_row(tmp_path: Path) -> None:
    # A misspelt scenario used to pass --check, then fail every simulator start, restart after
    # restart, minutes into a run whose row was already written.
    ledger = tmp_path / "l.sqlite"
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[server]\nprofile = "sim"\nscenario = "wedge-al"\n[run]\nledger = "{ledger}"\n')
    for args in (["config", "--check", str(bad)], ["run", str(bad)]):
        proc = _cli(*args)
        assert proc.returncode == 2, proc.stderr
        assert f"{bad}: server.scenario: wedge-al: no such file or bundled scenario" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    assert not ledger.exists()
    arg_set = tmp_path / "arg_set.toml"
    arg_set.write_text('[server]\nprofile = "sim"\narg_sets = ["turbo"]\n')
    proc = _cli("config", "--check", str(arg_set))
    assert proc.returncode == 2 and f"{arg_set}: server.arg_sets" in proc.stderr


def test_an_output_path_that_cannot_be_written_is_one_line_exit_2(tmp_path: Path) -> None:
    # A path under a plain file cannot be created, even by root (a read-only directory can).
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[run]\nledger = "{blocker}/l.sqlite"\n')
    proc = _cli("run", str(cfg))
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    # Said before anything starts (stack/preflight.py), naming the field.
    assert line.startswith(f"wedgewatch: error: run.ledger: {blocker}/l.sqlite: "), line
    ledger = tmp_path / "l.sqlite"
    with Ledger(ledger) as lg:
        make_run(lg, "r1", ["i1"])
        add_attempt(lg, "r1", "i1", 1, "submitted", patch="diff --git a/x b/x\n", resolved=1)
    out = blocker / "r.html"
    proc = _cli("report", "r1", "--ledger", str(ledger), "--html", str(out))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"wedgewatch: error: --html: {out}: ")


def test_run_needs_a_config_or_resume(tmp_path: Path) -> None:
    proc = _cli("run")
    assert proc.returncode == 2 and "CONFIG" in proc.stderr
    proc = _cli("run", "--resume", "nope", "--ledger", str(tmp_path / "none.sqlite"))
    assert proc.returncode == 2 and "none.sqlite does not exist" in proc.stderr


def test_progress_shows_done_running_retried_life_age_and_stalls() -> None:
    from rich.console import Console

    ctx = RunContext(
        cfg=Config(),
        ledger=Ledger(":memory:"),
        run_id="r",
        workdir=Path("/tmp"),
        proxy_url="",
        server=FixedLife(LifeInfo("life-x", 42.0, 17, 9000)),  # type: ignore[arg-type]
        make_sandbox=lambda i, p: None,  # type: ignore[arg-type,return-value]
        is_infra=lambda o: False,
        counters=Counters(total=10, final_before=2, done=3, running=4, retried=1, stalls=5, restarts=1),
    )
    console = Console(width=120, record=True)
    console.print(render(ctx, 0.0))
    text = console.export_text()
    assert "5/10 done, 4 running, 1 retried" in text
    assert "life-x" in text and "age 42s, 17 requests, 9000 tokens" in text
    assert "5 / 1" in text
