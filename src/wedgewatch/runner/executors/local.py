"""The local executor (the default): each attempt in a daemon thread of this process.

Not a pool: a thread abandoned after a server restart or a timeout must not hold a slot, and a
stopped run must not wait for it at exit. The thread inherits the run's list of command process
groups (``sandbox.groups``, through contextvars), so the run's stop kills its commands."""

from __future__ import annotations

import asyncio

from wedgewatch.config import Config
from wedgewatch.runner.executors import AgentEnding, AttemptJob
from wedgewatch.runner.executors.work import work
from wedgewatch.runner.threads import run_in_thread


class LocalExecutor:
    def __init__(self, cfg: Config | None = None) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    def submit(self, job: AttemptJob) -> asyncio.Future[AgentEnding]:
        loop = self._loop or asyncio.get_running_loop()
        return run_in_thread(loop, lambda: work(job), f"attempt-{job.attempt_id}")

    async def stop(self) -> None:
        """Nothing to release: abandoned threads are daemons, their commands die with the run's
        process-group list (runner/execution.py closes it)."""
