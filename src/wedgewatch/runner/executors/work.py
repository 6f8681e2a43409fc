"""The work of one attempt, wherever it runs: a fresh sandbox, the agent at the attempt's own
proxy URL, the sandbox closed. The same function runs in the local executor's thread and in a Ray
task, so the two cannot differ in what an attempt does."""

from __future__ import annotations

import logging
import time

from wedgewatch.base.protocols import AgentTask, Sandbox
from wedgewatch.runner.executors import AgentEnding, AttemptJob

log = logging.getLogger(__name__)


def work(job: AttemptJob) -> AgentEnding:
    """Sandbox, agent, sandbox closed. Never raises: the ending carries what went wrong."""
    ending = AgentEnding()
    sandbox: Sandbox | None = None
    t0 = time.perf_counter()
    try:
        sandbox = job.make_sandbox(job.instance, job.adir / "sandbox")
        ending.sandbox_path = str(sandbox.path)
        ending.sandbox_seconds = time.perf_counter() - t0
        from wedgewatch.agents import get_agent

        agent = get_agent(job.cfg.agent.name, job.cfg.agent)
        task = AgentTask(
            attempt_id=job.attempt_id,
            instance=job.instance,
            sandbox=sandbox,
            base_url=job.base_url,
            model=job.model,
            trajectory_path=job.adir / "trajectory.json",
            api_key=job.api_key,
        )
        t1 = time.perf_counter()
        try:
            ending.result = agent.run(task)
        finally:
            ending.agent_seconds = time.perf_counter() - t1
    except BaseException as exc:
        ending.exc = exc
    finally:
        if sandbox is not None:
            t2 = time.perf_counter()
            try:
                sandbox.close()
            except Exception:
                log.exception("closing the sandbox of %s failed", job.attempt_id)
            ending.sandbox_seconds += time.perf_counter() - t2
    return ending
