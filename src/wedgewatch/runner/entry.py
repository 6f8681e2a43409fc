"""The entry points the CLI, the demo and the benchmark call: a new run from a config, or a
resumed one from the ledger; each returns once the execution ends."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from wedgewatch.agents import check_agent
from wedgewatch.base.errors import BadInput
from wedgewatch.base.protocols import SandboxFactory
from wedgewatch.config import Config, with_secrets
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger, shares_runs
from wedgewatch.ledger.target import describe
from wedgewatch.runner import executors, lease, progress
from wedgewatch.runner.execution import (
    Execution,
    check_repositories,
    check_run_id,
    create_run,
    execute,
    load_run_config,
    new_run_id,
    resume_run,
)
from wedgewatch.runner.state import RunContext
from wedgewatch.stack import preflight, recovery
from wedgewatch.suites.load import load_suite

log = logging.getLogger(__name__)


async def _execute_with_display(
    ledger: Ledger,
    run_id: str,
    cfg: Config,
    resumed: dict[str, Any] | None,
    show_progress: bool,
    make_sandbox: SandboxFactory | None,
    on_context: Callable[[RunContext], None] | None,
    join: bool = False,
) -> Execution:
    # Before anything starts: what a killed process (this run's, or a serve's or wrap's on the same
    # ledger) left open is closed, and its servers are stopped.
    recovery.recover(ledger)
    holder: list[RunContext] = []

    def keep(ctx: RunContext) -> None:
        holder.append(ctx)
        if on_context is not None:
            on_context(ctx)

    async with progress.live(holder, show_progress):
        return await execute(
            ledger, run_id, cfg, resumed=resumed, make_sandbox=make_sandbox, on_context=keep, join=join
        )


def _run(coro: Coroutine[Any, Any, Execution]) -> Execution:
    """asyncio.run, with SIGTERM's cancellation surfacing as Ctrl-C's KeyboardInterrupt."""
    try:
        return asyncio.run(coro)
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None


def start(
    cfg: Config,
    *,
    run_id: str | None = None,
    show_progress: bool = False,
    make_sandbox: SandboxFactory | None = None,
    on_context: Callable[[RunContext], None] | None = None,
    source: str = "config",
) -> Execution:
    """Load the suite (any error before a row is written), create the run, execute it.
    ``source`` names the config in error messages (its file)."""
    rid = check_run_id(run_id) if run_id else new_run_id()
    from wedgewatch.supervisor import profiles

    for member in cfg.members():
        profiles.check(member, source)  # before any row: a bad field here is exit 2, not a failed run
        profiles.check_requested_model(member, cfg.agent.model)
    check_agent(cfg.agent.name)  # before any row, and before the command prints its view line
    executors.check(cfg)
    preflight.check(cfg, workdir=True)  # one line now, not every attempt failing alike
    suite = load_suite(cfg.suite)
    if make_sandbox is None:
        check_repositories(cfg, suite)
    with Ledger(cfg.run.ledger) as ledger:
        create_run(ledger, cfg, suite, rid)
        log.info("run %s: %d instances into %s", rid, len(suite.instances), describe(cfg.run.ledger))
        return _run(_execute_with_display(ledger, rid, cfg, None, show_progress, make_sandbox, on_context))


def resume(
    ledger_path: str | Path,
    run_id: str,
    *,
    given: Config | None = None,
    attempts: int | None = None,
    show_progress: bool = False,
    make_sandbox: SandboxFactory | None = None,
    on_context: Callable[[RunContext], None] | None = None,
) -> Execution:
    """Resume ``run_id`` with its own config snapshot. A config given on the command line must
    match the snapshot: a resumed run that changed its settings would not be one run. The one
    change a resume can make is ``attempts``: a higher attempt budget, recorded in the ledger as a
    change of the run, which gives its infra_failed instances their new attempts."""
    if attempts is not None and attempts < 1:
        raise BadInput(f"--attempts: {attempts} must be at least 1")
    from wedgewatch.ledger.target import exists

    if not exists(ledger_path):
        raise BadInput(f"--ledger: {ledger_path} does not exist")
    with Ledger(ledger_path) as ledger:
        stored = load_run_config(ledger, run_id)
        if given is not None and attempts is not None:
            given = given.model_copy(
                update={"run": given.run.model_copy(update={"attempts": stored.run.attempts})}
            )
        _same_config(given, stored, f"--resume {run_id}")
        with_secrets(stored, given, f"--resume {run_id}")  # refused before any row is written
        check_agent(stored.agent.name)
        cfg, found = resume_run(ledger, run_id, attempts)
        cfg = with_secrets(cfg, given, f"--resume {run_id}")  # the ledger keeps none of them
        preflight.check(cfg, str(ledger_path), "--ledger", workdir=True)
        return _run(
            _execute_with_display(ledger, run_id, cfg, found, show_progress, make_sandbox, on_context)
        )


def join(
    ledger_url: str,
    run_id: str,
    *,
    given: Config | None = None,
    show_progress: bool = False,
    make_sandbox: SandboxFactory | None = None,
    on_context: Callable[[RunContext], None] | None = None,
) -> Execution:
    """One more runner on ``run_id``, beside those already working on it (on any host), with the
    run's own config snapshot and budget in force and a server stack of its own. Only on a ledger
    several runners can share (PostgreSQL): a SQLite run keeps one writer process."""
    if not shares_runs(ledger_url):
        raise BadInput(
            f"--join: {describe(ledger_url)} is a SQLite ledger, one runner per run; several runners "
            "on one run need a postgresql:// ledger (wedgewatch ledger copy moves a run there)"
        )
    with Ledger(ledger_url) as ledger:
        stored = load_run_config(ledger, run_id)  # BadInput when there is no such run
        _same_config(given, stored, f"--join {run_id}")
        check_agent(stored.agent.name)
        # Attempts of runners already dead are ended now, so their instances are this one's too.
        lease.reap(ledger, run_id, by=None)
        in_force = int(queries.budgets(ledger, run_id)["attempts_max"])
        cfg = stored.model_copy(update={"run": stored.run.model_copy(update={"attempts": in_force})})
        cfg = with_secrets(cfg, given, f"--join {run_id}")  # the ledger keeps none of them
        return _run(
            _execute_with_display(
                ledger, run_id, cfg, None, show_progress, make_sandbox, on_context, join=True
            )
        )


def _same_config(given: Config | None, stored: Config, flag: str) -> None:
    if given is not None and given.hash() != stored.hash():
        diff = _first_difference(given.snapshot(), stored.snapshot())
        raise BadInput(
            f"{flag}: the config differs from the run's snapshot at {diff}; "
            "leave CONFIG out (the snapshot is used) or start a new run"
        )


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else key)
    return path or "(root)"
