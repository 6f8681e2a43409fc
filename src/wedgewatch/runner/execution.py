"""Orchestration of a run: the run's rows, the supervisor and the proxy in one event loop,
``run.concurrency`` instances at a time, each instance driven by what the ledger says comes next
(``instance_next``) until its outcome is final; then the run's end mark.

A run is created once (``create_run``: the config snapshot, the suite as loaded) and executed
one or more times (``execute``: the first time, and after each ``--resume``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import secrets
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wedgewatch import __version__
from wedgewatch.base.errors import BadInput, LedgerConflict, ServerError, SuiteError
from wedgewatch.base.events import Event, Promoted, Restarting, Stalled
from wedgewatch.base.protocols import SandboxFactory
from wedgewatch.base.vocab import (
    ABORTED,
    API_ERROR,
    FINISHED,
    INTERRUPTED,
    JOINED,
    RESUMED,
    RUNNING,
    SERVER_RESTARTED,
    STARTED,
    is_infra_outcome,
)
from wedgewatch.config import Config, effective, validate
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger
from wedgewatch.runner import claim, executors, lease, resume
from wedgewatch.runner.attempt import end_all_in_flight, run_attempt
from wedgewatch.runner.evaluate import evaluate_attempt
from wedgewatch.runner.state import RunContext
from wedgewatch.runner.timings import Span
from wedgewatch.sandbox import groups
from wedgewatch.suites.load import Suite
from wedgewatch.wire import access

log = logging.getLogger(__name__)

PROXY_HOST = ("run.ray.proxy_host", "the run's proxy port")
"""What a failed bind of the run's proxy names: its address is a config field, its port is free."""
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def new_run_id() -> str:
    return time.strftime("run-%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def check_run_id(run_id: str) -> str:
    if not RUN_ID.match(run_id):
        raise BadInput(
            f"--run-id: {run_id!r} must be 1-64 of A-Z a-z 0-9 . _ - (it goes into URLs and paths)"
        )
    return run_id


def create_run(ledger: Ledger, cfg: Config, suite: Suite, run_id: str) -> None:
    """The run row and its instances (the denominator), in that order, before anything runs."""
    if queries.run_exists(ledger, run_id):
        raise BadInput(f"--run-id: run {run_id!r} already exists in {ledger.path}; use --resume {run_id}")
    ledger.append(
        "runs",
        {
            "run_id": run_id,
            "started_at": time.time(),
            "config_json": cfg.snapshot(),
            "config_hash": cfg.hash(),
            "tool_version": __version__,
            "suite": suite.source,
            "attempts_max": cfg.run.attempts,
            "seed": cfg.run.seed,
        },
    )
    ledger.append_many(
        "run_instances",
        [
            {"run_id": run_id, "instance_id": inst["instance_id"], "position": n, "instance_json": inst}
            for n, inst in enumerate(suite.instances)
        ],
    )


def load_run_config(ledger: Ledger, run_id: str) -> Config:
    run = queries.resolve_run(ledger, run_id)
    return validate(json.loads(run["config_json"]), f"{ledger.path}: run {run_id} config snapshot")


def default_sandbox_factory(cfg: Config) -> SandboxFactory:
    """Sandboxes of the ``[sandbox] kind`` backend; BadInput for a kind not in the registry."""
    from wedgewatch.sandbox import factory_for

    return factory_for(cfg)


def check_repositories(cfg: Config, suite: Suite) -> None:
    """Before any row is written: every instance must have a repository for its sandboxes, or
    each of its attempts would fail alike as a harness error."""
    from wedgewatch.sandbox import NEEDS_REPOSITORY, get_sandbox
    from wedgewatch.sandbox.local import has_repository, mirror_of

    get_sandbox(cfg.sandbox.kind)  # an unknown kind is the user's error, said before anything runs
    if cfg.sandbox.kind == "container" and cfg.agent.name == "command":
        raise BadInput(
            "agent.name = command runs its program on the host, in the work tree: a container "
            "has none there (use sandbox.kind local or bwrap, or an agent that runs commands "
            "through the sandbox: bash, mini-swe-agent)"
        )
    tool = {"bwrap": "bwrap", "container": cfg.sandbox.container_cli}.get(cfg.sandbox.kind)
    if tool and shutil.which(tool) is None:  # or every attempt of every instance would fail alike
        raise BadInput(
            f"sandbox.kind = {cfg.sandbox.kind}: `{tool}` is not installed "
            "(Debian: apt-get install bubblewrap podman runc; `make install` does it as root)"
        )
    if cfg.sandbox.kind not in NEEDS_REPOSITORY:
        return  # the instance's image holds its repository
    repos_dir = Path(cfg.suite.repos_dir) if cfg.suite.repos_dir else None
    missing = [i for i in suite.instances if not has_repository(i, repos_dir)]
    if missing:
        first = missing[0]
        where = mirror_of(first, repos_dir) or f"[suite] repos_dir/{str(first['repo']).replace('/', '__')}"
        raise SuiteError(
            f"{suite.source}: {len(missing)} instance(s) have no repository, the first "
            f"{first['instance_id']} ({first['repo']!r}): put a git clone of it at {where} "
            "(wedgewatch never clones from the network)"
        )


@dataclass
class Execution:
    """What one execution of a run did (the summary itself comes from the ledger)."""

    run_id: str
    end_mark: str
    error: str | None = None
    ctx: RunContext | None = None


async def _drive_instance(ctx: RunContext, instance_id: str) -> tuple[bool, str | None]:
    """Attempts, then evaluation, as the ledger says, until nothing is left to do. Returns whether
    this runner did any of it (False: another runner of the run holds the instance) and the
    instance's final attempt (the server that served it counts it toward a recycle)."""
    inst = ctx.instance(instance_id)
    worked = False
    while True:
        span = Span()
        span.start()
        nxt = queries.instance_next(ctx.ledger, ctx.run_id, instance_id)
        span.stop()
        ctx.timings.decisions.append((span.cpu, span.wall))
        action = nxt["next_action"]
        if action == "attempt":
            try:
                await run_attempt(ctx, inst, int(nxt["next_attempt_no"]))
            except LedgerConflict:
                return worked, None  # another runner claimed this attempt first: the instance is its
        elif action == "evaluate" and ctx.cfg.run.evaluate:
            eval_no = claim.evaluation(ctx, str(nxt["final_attempt"]))
            if eval_no is None:
                return worked, None  # evaluated by another runner now
            await evaluate_attempt(ctx, inst, str(nxt["final_attempt"]), eval_no)
        elif action == RUNNING:
            if not ctx.ledger.shared:
                raise RuntimeError(f"{instance_id}: an attempt of this run is in flight outside this process")
            return worked, None  # on another runner; taken over (claim.Dispenser) if that one dies
        else:
            final = nxt["final_attempt"]
            return worked, str(final) if final is not None else None
        worked = True


async def _workers(ctx: RunContext, todo: list[str], lost: Callable[[], bool] = lambda: False) -> None:
    dispenser = claim.Dispenser(ctx, todo, lost)

    async def worker() -> None:
        while (iid := await dispenser.take()) is not None:
            ctx.counters.running += 1
            worked, last = False, None  # type: tuple[bool, str | None]
            try:
                worked, last = await _drive_instance(ctx, iid)
            finally:
                ctx.counters.running -= 1
                dispenser.release(iid, worked)
            if worked:
                ctx.counters.done += 1
                ctx.server.note_instance_done(last)

    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(worker()) for _ in range(min(ctx.cfg.run.concurrency, max(1, len(todo))))]
        if ctx.ledger.shared:
            tg.create_task(dispenser.watch(tasks))  # a runner found dead by the others stops now


def _mark(ledger: Ledger, run_id: str, kind: str, detail: dict[str, Any]) -> None:
    ledger.append("run_marks", {"run_id": run_id, "ts": time.time(), "kind": kind, "detail_json": detail})


async def execute(
    ledger: Ledger,
    run_id: str,
    cfg: Config,
    *,
    resumed: dict[str, Any] | None = None,
    make_sandbox: SandboxFactory | None = None,
    on_context: Callable[[RunContext], None] | None = None,
    join: bool = False,
) -> Execution:
    """Run (or go on with) ``run_id`` until every instance is final, the run is stopped, or the
    server cannot be kept up. ``cfg`` is the run's own config (from its snapshot). ``join``: one
    more runner on a run others may be working on (a shared ledger; docs/scale-out.md)."""
    from wedgewatch.stack.servers import Stack

    eff = effective(cfg)
    total = ledger.query("SELECT COUNT(*) FROM run_instances WHERE run_id = ?", (run_id,))[0][0]
    executor = executors.get_executor(eff)  # an unknown one, or Ray not installed: before any mark
    # Beyond loopback (Ray on several hosts) the proxy takes a key only this run's agents get.
    agent_key = None if access.is_loopback(executors.proxy_host(eff)) else secrets.token_urlsafe(24)
    stack = Stack(eff.members(), eff.watchdog, ledger=ledger, run_id=run_id, api_key=agent_key)
    pool = stack.pool
    ctx = RunContext(
        cfg=eff,
        ledger=ledger,
        run_id=run_id,
        workdir=Path(eff.run.workdir).resolve() / run_id,
        proxy_url="",
        server=pool,
        make_sandbox=make_sandbox or default_sandbox_factory(eff),
        is_infra=is_infra_outcome,
        loop=asyncio.get_running_loop(),
        executor=executor,
        agent_key=agent_key or "wedgewatch",  # the key an agent gives a proxy that asks none
    )

    # A planned recycle waits for the attempts in flight on its server (supervisor/drain.py), and
    # the pool sends a new attempt to the server with the least work.
    pool.count_busy(
        lambda life_id: sum(1 for f in ctx.inflight.values() if f.ended_by is None and f.life_id == life_id)
    )

    # With requests resumed on the next life, a restart costs an attempt nothing: it goes on.
    resumes = eff.watchdog.enabled and not eff.watchdog.record_only and eff.watchdog.on_wedge == "resume"

    def on_event(ev: Event) -> None:
        if isinstance(ev, Restarting) or (isinstance(ev, Promoted) and ev.planned):
            ctx.counters.restarts += 1  # a spare's handover (planned) cuts nothing: no Restarting
            if resumes or isinstance(ev, Promoted):
                return
            detail = {"restart_reason": ev.reason, "life_id": ev.life_id}
            # Only the attempts on the restarted server: a pool's other members keep theirs.
            end_all_in_flight(ctx, API_ERROR, SERVER_RESTARTED, detail, life_id=ev.life_id)
        elif isinstance(ev, Stalled):
            ctx.counters.stalls += 1

    stack.bus.subscribe(on_event)
    role = "resume" if resumed is not None else "join" if join else "start"
    runner = lease.Runner(ledger, run_id, role, eff.run)
    runner.start()
    stack.bus.subscribe(runner.on_event)
    ctx.runner_id = runner.runner_id
    todo = queries.unfinished(ledger, run_id)
    ctx.counters.total = total
    ctx.counters.final_before = total - len(todo)
    if on_context is not None:
        on_context(ctx)
    _mark(
        ledger,
        run_id,
        {"resume": RESUMED, "join": JOINED}.get(role, STARTED),
        {"pid": os.getpid(), "runner_id": runner.runner_id, "host": runner.host, **(resumed or {})},
    )
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        # SIGHUP (a closed terminal, a dropped SSH session) stops a run as SIGTERM does.
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
        loop.add_signal_handler(signal.SIGHUP, task.cancel)
    result = Execution(run_id, FINISHED, ctx=ctx)
    # This run's own list of command process groups: agent threads inherit it (contextvars), and
    # closing it on an early stop kills them all and starts no more.
    with groups.scope() as run_groups:
        try:
            try:
                if todo:  # a resume of a finished run needs no server
                    # Built once here, in the loop's thread: a bad agent fails before a server starts,
                    # and its modules (openai, httpx, litellm) are imported once. Four agent threads
                    # importing them at once can meet a partially initialised module (seen: httpx).
                    from wedgewatch.agents import get_agent

                    get_agent(eff.agent.name, eff.agent)
                    await executor.start()
                    await stack.start_proxy(executors.proxy_host(eff), names=PROXY_HOST)
                    ctx.proxy_url = stack.proxy_url
                    await stack.start()
                    await _workers(ctx, todo, runner.is_lost)
            except BaseExceptionGroup as group:  # from the workers' TaskGroup: the first cause speaks
                for extra in group.exceptions[1:]:
                    log.error("also failed: %r", extra)
                raise group.exceptions[0] from None
            _mark(
                ledger,
                run_id,
                FINISHED,
                {"pid": os.getpid(), "unfinished": len(queries.unfinished(ledger, run_id))},
            )
        except asyncio.CancelledError:
            _mark(ledger, run_id, INTERRUPTED, {"pid": os.getpid()})
            result.end_mark = INTERRUPTED
            raise
        except Exception as exc:
            # The server could not be kept up (ServerError), or wedgewatch itself failed: the run
            # stops with a mark saying why, and --resume goes on from there.
            kind = "server" if isinstance(exc, ServerError) else type(exc).__name__
            _mark(ledger, run_id, ABORTED, {"pid": os.getpid(), "error": f"{kind}: {str(exc)[:2000]}"})
            result.end_mark, result.error = ABORTED, str(exc)
            raise
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
            loop.remove_signal_handler(signal.SIGHUP)
            # Agent threads are abandoned when a run stops early; the commands they started are
            # not: closing the run's list kills them (a finished run has none left).
            run_groups.close()
            try:
                await executor.stop()  # its attempts stop before their server does
                await stack.stop()
            finally:
                runner.close(result.end_mark)  # after its last row: then others may take over
    return result


def resume_run(ledger: Ledger, run_id: str, attempts: int | None = None) -> tuple[Config, dict[str, Any]]:
    """Checks and marks before a resumed execution (``attempts``: raise the budget to that);
    returns the run's config, with the attempt budget in force, and what was found."""
    cfg = load_run_config(ledger, run_id)
    found = resume.prepare(ledger, run_id, attempts)
    in_force = int(queries.budgets(ledger, run_id)["attempts_max"])
    return cfg.model_copy(update={"run": cfg.run.model_copy(update={"attempts": in_force})}), found
