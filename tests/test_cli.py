"""The command line's contract: bad input is one line on stderr and exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wedgewatch", *args], capture_output=True, text=True, timeout=60
    )


def test_version() -> None:
    r = _run("version")
    assert r.returncode == 0
    assert r.stdout.strip() == __import__("wedgewatch").__version__


def test_unknown_flag_is_one_line_naming_the_flag() -> None:
    r = _run("version", "--bogus")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "--bogus" in lines[0]


def test_a_harness_option_given_to_wrap_without_the_separator_gets_the_hint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from wedgewatch.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["wrap", "run.toml", "python", "my_eval.py", "--base-url", "{base_url}"])
    line = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and "\n" not in line
    assert line.endswith(
        "No such option: --base-url; if --base-url is the harness's own, put -- before its command: "
        "wedgewatch wrap CONFIG [OPTIONS] -- CMD ARGS..."
    ), line
    # With the separator given, an unknown option is wrap's own mistake: no hint.
    with pytest.raises(SystemExit):
        main(["wrap", "run.toml", "--bogus", "--", "true"])
    assert capsys.readouterr().err.strip().endswith("No such option: --bogus")


def test_no_args_prints_help() -> None:
    r = _run()
    assert r.returncode == 0
    assert "Usage" in r.stdout


def test_help_lists_every_command_in_the_order_a_user_meets_them() -> None:
    out = _run("--help").stdout
    listed = [line.split()[0] for line in out.split("Commands:")[1].splitlines() if line.startswith("  ")]
    assert listed == [
        "demo", "sim", "proxy", "serve", "wrap", "run", "view", "report", "export", "import-report",
        "suite", "audit", "compare", "lives", "scan", "plan", "ledger", "config", "bench", "version",
    ]  # fmt: skip


def test_a_command_imports_its_own_modules_only() -> None:
    from wedgewatch.cli import _command_modules

    assert _command_modules(["sim", "--port", "0"]) == ["sim"]
    assert _command_modules(["import-report", "x.json"]) == ["import_report"]
    assert _command_modules(["config", "schema"]) == ["config_cmd"]
    assert _command_modules(["bench", "proxy", "--streams", "1"]) == ["bench", "bench.proxy"]
    whole = _command_modules(["bench"])
    assert whole[0] == "bench" and "bench.proxy" in whole and all(m.startswith("bench") for m in whole)
    everything = _command_modules(["--help"])
    assert {"sim", "run", "bench.proxy", "config_cmd"} <= set(everything)
    assert _command_modules(["no-such-command"]) == everything  # click lists them all in its error


def test_the_simulator_starts_without_the_configs_models_or_the_ledger() -> None:
    # What a short-lived `wedgewatch sim` (started by every supervisor and many tests) imports.
    probe = (
        "import sys; from wedgewatch.cli import main\n"
        "try:\n    main(['sim', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('wedgewatch.config', 'wedgewatch.ledger', 'wedgewatch.cli.run') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"
