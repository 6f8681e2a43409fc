"""One attempt: a row when it starts, a fresh sandbox and the agent at the attempt's own proxy
URL on the run's executor (a thread of this process, or a Ray task: runner/executors), and a row
when it ends, with the status the retry policy decides. Every row is written here, in the driver,
whatever the executor: the worker hands back an AgentEnding and always closes its sandbox itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from wedgewatch.base.errors import ExecutorError, LedgerConflict, WorkerLost, describe
from wedgewatch.base.protocols import LifeInfo
from wedgewatch.base.vocab import (
    API_ERROR,
    ATTEMPT_TIMEOUT,
    HARNESS_ERROR,
    INTERRUPTED,
    MODEL_SIDE,
    RUN_STOPPED,
    WORKER_LOST,
    requeued,
)
from wedgewatch.config import Config
from wedgewatch.ledger import queries
from wedgewatch.runner.executors import AgentEnding, AttemptJob
from wedgewatch.runner.executors.local import LocalExecutor
from wedgewatch.runner.retry import decide
from wedgewatch.runner.state import InFlight, Instance, RunContext
from wedgewatch.runner.timings import Span

log = logging.getLogger(__name__)

# Seconds past agent.timeout before the runner gives up on an agent thread itself. Agents enforce
# agent.timeout on their own; this is the net under an agent that does not.
TIMEOUT_GRACE = 30.0


def _age(info: LifeInfo | None) -> dict[str, Any]:
    if info is None:
        return {"age_seconds": None, "age_requests": None, "age_tokens": None}
    return {
        "age_seconds": round(info.age_seconds, 3),
        "age_requests": info.age_requests,
        "age_tokens": info.age_tokens,
    }


def requested_model(cfg: Config) -> str:
    """The model name the agent requests: ``agent.model``, else the server's served name."""
    server = cfg.members()[0]  # a pool's members serve one model
    return cfg.agent.model or server.served_model_name or server.model


async def run_attempt(ctx: RunContext, inst: Instance, attempt_no: int) -> str:
    """Run one attempt to its end row; return its status."""
    assert ctx.loop is not None
    await ctx.server.wait_ready()  # raises the supervisor's failure when it gave up
    span = Span()
    span.start()
    instance_id = inst.instance_id
    attempt_id = ctx.attempt_id(inst, attempt_no)
    adir = ctx.workdir / attempt_id
    life = ctx.server.bind(attempt_id)  # a pool sends the attempt to one of its servers
    life_id = life.life_id if life is not None else ctx.server.life_id
    started_at = time.time()
    # The claim: with several runners on the run, a second insert of this attempt number is
    # refused (LedgerConflict, unique index attempts_claim) and the caller leaves the instance.
    ctx.append(
        "attempts",
        {
            "attempt_id": attempt_id,
            "run_id": ctx.run_id,
            "instance_id": instance_id,
            "attempt_no": attempt_no,
            "started_at": started_at,
            "life_id": life_id,
            "agent": ctx.cfg.agent.name,
            "sandbox_path": str(adir / "sandbox"),
            "runner_id": ctx.runner_id,
            **_age(life),
        },
    )
    ctx.counters.attempts += 1
    if attempt_no > 1:
        ctx.counters.retried += 1
    job = AttemptJob(
        attempt_id=attempt_id,
        instance=inst.record,
        adir=adir,
        base_url=ctx.agent_base_url(attempt_id),
        model=requested_model(ctx.cfg),
        cfg=ctx.cfg,
        make_sandbox=ctx.make_sandbox,
        api_key=ctx.agent_key,
    )
    if ctx.executor is None:
        ctx.executor = LocalExecutor()
    fut = ctx.executor.submit(job)
    flight = InFlight(attempt_id, instance_id, life_id, started_at, fut)
    ctx.inflight[attempt_id] = flight
    span.stop()
    try:
        ending = await asyncio.wait_for(fut, timeout=ctx.cfg.agent.timeout + TIMEOUT_GRACE)
    except TimeoutError:
        flight.ended_by = (HARNESS_ERROR, ATTEMPT_TIMEOUT)
        await end_attempt(ctx, flight, *flight.ended_by, detail={"limit": ctx.cfg.agent.timeout})
        return flight.ended_by[0]
    except WorkerLost as exc:
        if flight.ended_by is not None:
            return flight.ended_by[0]
        return worker_lost(ctx, flight, exc)
    except asyncio.CancelledError:
        # The run is stopping (Ctrl-C, SIGTERM): the attempt's end is a fact worth writing now;
        # a resume would otherwise find it in flight and write the same.
        if flight.ended_by is None:
            flight.ended_by = (INTERRUPTED, RUN_STOPPED)
            write_end(ctx, flight, INTERRUPTED, RUN_STOPPED, {"by": "stop"})
        raise
    finally:
        ctx.inflight.pop(attempt_id, None)
    span.start()
    if flight.ended_by is not None:
        return flight.ended_by[0]  # a server restart ended it first; its end row is written
    assert ending is not None
    outcomes = [r["outcome"] for r in queries.attempt_requests(ctx.ledger, attempt_id)]
    status, reason = decide(ending.result, ending.exc, outcomes, ctx.is_infra)
    result = ending.result
    span.stop()
    detail: dict[str, Any] = {
        "requests": len(outcomes),
        "timings": {
            "agent": round(ending.agent_seconds, 4),
            "sandbox": round(ending.sandbox_seconds, 4),
            "runner_cpu": round(span.cpu, 6),
            "runner_wall": round(span.wall, 6),
        },
    }
    if ending.worker is not None:
        detail["worker"] = ending.worker
    if ending.exc is not None:
        detail["error"] = describe(ending.exc)
    if result is not None and status != result.status:
        detail["agent_said"] = {"status": result.status, "reason": result.reason}
    if result is not None and result.extra:
        detail["agent"] = result.extra
    span.start()
    await end_attempt(
        ctx,
        flight,
        status,
        reason,
        detail=detail,
        patch=result.patch if result is not None and status in MODEL_SIDE else None,
        steps=result.steps if result is not None else None,
        tokens=result.tokens if result is not None else None,
    )
    # The runner's own synchronous work for this attempt, its end row included (the value in the
    # row itself cannot include the writing of the row).
    span.stop()
    ctx.timings.overhead.append((span.cpu, span.wall))
    if status == API_ERROR:
        # A canary may be deciding whether the server is wedged: if it is, the attempt is
        # requeued (ledger view attempt_budget), and the next decision must see that.
        await ctx.server.settle(flight.life_id)
    return status


def worker_lost(ctx: RunContext, flight: InFlight, exc: WorkerLost) -> str:
    """The process or node running the attempt died: it ends ``interrupted`` (no budget used, as
    after a stopped run) and the instance's next step is another attempt. Past
    ``run.ray.lost_worker_limit`` losses of one instance the run stops instead (ExecutorError)."""
    flight.ended_by = (INTERRUPTED, WORKER_LOST)
    write_end(ctx, flight, INTERRUPTED, WORKER_LOST, {"by": "executor", "error": str(exc)[:2000]})
    lost = ctx.lost_workers[flight.instance_id] = ctx.lost_workers.get(flight.instance_id, 0) + 1
    limit = ctx.cfg.run.ray.lost_worker_limit
    if lost >= limit:
        raise ExecutorError(
            f"{flight.instance_id}: {lost} attempts lost their worker (run.ray.lost_worker_limit = "
            f"{limit}); the last: {exc}"
        )
    log.warning("%s: its worker was lost (%s); the instance is attempted again", flight.attempt_id, exc)
    return INTERRUPTED


async def end_attempt(
    ctx: RunContext,
    flight: InFlight,
    status: str,
    reason: str,
    *,
    detail: dict[str, Any] | None = None,
    patch: str | None = None,
    steps: int | None = None,
    tokens: int | None = None,
    life_id: str | None = None,
) -> None:
    """Write the attempt's end row and tell the supervisor. Called once per attempt."""
    life = ctx.server.life(flight.attempt_id)  # the life of the server the attempt was sent to
    end_life = life_id or (life.life_id if life is not None else flight.life_id)
    if not _end_once(
        ctx,
        flight,
        {
            "attempt_id": flight.attempt_id,
            "ended_at": time.time(),
            "status": status,
            "reason": reason,
            "patch": patch,
            "steps": steps,
            "tokens": tokens,
            "life_id": end_life,
            "detail_json": detail or {},
            **_age(life if life is not None and life.life_id == end_life else None),
        },
    ):
        return
    if status == API_ERROR:
        ctx.counters.api_errors += 1
    # The supervisor's consecutive-API-error counter hears about attempts that say something about
    # the server: api_error (True) and model-side endings (False). A restart's own casualties (those
    # already known to be requeued) and harness errors say nothing about it, and counting the former
    # would restart in a loop.
    if status == API_ERROR and not requeued(status, reason):
        ctx.server.note_attempt(True, flight.life_id)
    elif status in MODEL_SIDE:
        ctx.server.note_attempt(False, flight.life_id)


def write_end(ctx: RunContext, flight: InFlight, status: str, reason: str, detail: dict[str, Any]) -> None:
    """The end row of an attempt ended from outside its worker (restart, stop)."""
    row = {
        "attempt_id": flight.attempt_id,
        "ended_at": time.time(),
        "status": status,
        "reason": reason,
        "life_id": detail.get("life_id") or flight.life_id,
        "detail_json": detail,
    }
    if _end_once(ctx, flight, row) and status == API_ERROR:
        ctx.counters.api_errors += 1


def _end_once(ctx: RunContext, flight: InFlight, row: dict[str, Any]) -> bool:
    """Write the attempt's end; False when it has one already: another runner of the run found
    this one dead (its lease ran out) and ended it ``interrupted``, and its result is dropped."""
    try:
        ctx.append("attempt_ends", row)
    except LedgerConflict:
        log.warning("%s was ended by another runner of the run; its result is dropped", flight.attempt_id)
        return False
    return True


def end_all_in_flight(
    ctx: RunContext, status: str, reason: str, detail: dict[str, Any], life_id: str | None = None
) -> int:
    """End every attempt in flight now (those on ``life_id`` when given: a restarted server's);
    their threads are abandoned and their late results ignored. Synchronous: called from an event
    subscriber in the loop's thread."""
    n = 0
    for flight in list(ctx.inflight.values()):
        if flight.ended_by is not None or flight.done.done():
            continue
        if life_id is not None and flight.life_id not in (None, life_id):
            continue
        flight.ended_by = (status, reason)
        write_end(ctx, flight, status, reason, detail)
        # Wake the attempt's worker, which returns the status and lets the instance go on.
        flight.done.set_result(AgentEnding())
        n += 1
    return n
