"""``wedgewatch run CONFIG.toml [--run-id ID] [--resume ID | --join ID] [--json]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base import redact
from wedgewatch.base.errors import BadInput, WedgewatchError
from wedgewatch.cli._app import ViewOption, app, check_line, start_view, view_line
from wedgewatch.config import Config, RunConfig, load_config


@app.command("run")
def run_cmd(
    config: Annotated[
        Path | None,
        typer.Argument(help="Run config (TOML; `wedgewatch config --example`). Optional with --resume."),
    ] = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Id of the new run (default: time-based).")
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            help="Go on with this run after a crash, Ctrl-C or SIGKILL (its own config is used).",
        ),
    ] = None,
    join: Annotated[
        str | None,
        typer.Option(
            "--join",
            help="Work on this run beside the runners already on it (any host; a postgresql:// "
            "ledger; its own config is used).",
        ),
    ] = None,
    ledger: Annotated[
        str | None,
        typer.Option(
            "--ledger",
            help="Ledger (a SQLite file or postgresql://...) for --resume or --join "
            "(default: CONFIG's run.ledger).",
        ),
    ] = None,
    attempts: Annotated[
        int | None,
        typer.Option(
            "--attempts",
            help="With --resume: raise the run's attempts per instance to N (recorded in the ledger); "
            "its infra_failed instances get the new attempts.",
        ),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the final summary as JSON, no live display.")
    ] = False,
    view: ViewOption = False,
) -> None:
    """Run a suite (or resume a run) and print its summary: infra_failed and pending are counted
    beside the score, never inside it."""
    from wedgewatch.runner import entry as runner_main
    from wedgewatch.runner.execution import check_run_id, new_run_id

    cfg: Config | None = load_config(config) if config is not None else None
    show = not json_out and sys.stderr.isatty()
    # --view: the page's process starts before the run and waits for its ledger; the line giving its
    # address (or, without --view, the command that starts one) comes once the run has passed its
    # checks and has its row, so a refused run prints its one line and nothing else.
    child = None

    def announce(ctx: object) -> None:
        line = f"view on {child.url}" if child is not None else view_line(str(ledger_path), rid)
        typer.echo(line, err=True)

    if join is not None:
        for flag, value in (("--resume", resume), ("--run-id", run_id), ("--attempts", attempts)):
            if value is not None:
                raise BadInput(f"{flag}: not with --join (a runner joins the run as it is)")
        rid = join
        ledger_path = str(ledger) if ledger else (cfg.run.ledger if cfg else RunConfig().ledger)
        join_cfg = cfg

        def call() -> object:
            return runner_main.join(ledger_path, rid, given=join_cfg, show_progress=show, on_context=announce)
    elif resume is not None:
        if run_id is not None:
            raise BadInput("--run-id: not with --resume (the run keeps its id)")
        rid = resume
        ledger_path = str(ledger) if ledger else (cfg.run.ledger if cfg else RunConfig().ledger)
        given = cfg

        def call() -> object:
            return runner_main.resume(
                ledger_path, rid, given=given, attempts=attempts, show_progress=show, on_context=announce
            )
    else:
        if cfg is None:
            raise BadInput("CONFIG: a config file is required (or --resume RUN_ID)")
        if attempts is not None:
            raise BadInput("--attempts: only with --resume; a new run takes run.attempts from its config")
        if ledger is not None:
            raise BadInput(
                "--ledger: only with --resume or --join; a new run writes to its config's run.ledger"
            )
        rid = check_run_id(run_id) if run_id else new_run_id()
        ledger_path = cfg.run.ledger
        new_cfg = cfg

        def call() -> object:
            return runner_main.start(
                new_cfg, run_id=rid, show_progress=show, source=str(config), on_context=announce
            )

    shown = redact.url(str(ledger_path))  # a password in its URL is masked in what is printed
    if view:
        child = start_view(str(ledger_path), rid)
    try:
        call()
    except KeyboardInterrupt:
        _print_summary(ledger_path, rid, json_out)
        again = f"--join {rid}" if join is not None else f"--resume {rid}"
        typer.echo(
            f"interrupted; go on with: wedgewatch run {again} --ledger {shown}",
            err=True,
        )
        raise SystemExit(130) from None
    except WedgewatchError as exc:
        if not isinstance(exc, BadInput):
            _print_summary(ledger_path, rid, json_out)
            again = f"--join {rid}" if join is not None else f"--resume {rid}"
            typer.echo(
                f"run {rid} stopped; go on with: wedgewatch run {again} --ledger {shown}",
                err=True,
            )
        raise
    finally:
        if child is not None:
            child.stop()
    _print_summary(ledger_path, rid, json_out)
    check_line(ledger_path)


def _print_summary(ledger_path: str, run_id: str, as_json: bool) -> None:
    from wedgewatch.analysis.summary import render_table, summarise
    from wedgewatch.ledger import Ledger, queries
    from wedgewatch.ledger.target import exists

    if not exists(ledger_path):
        return
    with Ledger(ledger_path) as ledger:
        if not queries.run_exists(ledger, run_id):
            return
        s = summarise(ledger, run_id)
    shown = redact.url(str(ledger_path))  # whoever runs the commands printed gives their own password
    s["ledger"] = shown
    if as_json:
        typer.echo(json.dumps(s, indent=2))
        return
    from rich.console import Console

    Console(width=max(Console().width, 110)).print(render_table(s))
    typer.echo(f"ledger: {shown}   export: wedgewatch export {run_id} --ledger {shown} --format results")
