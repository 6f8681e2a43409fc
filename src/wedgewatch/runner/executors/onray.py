"""The Ray executor (``run.executor = "ray"``): each attempt's agent and sandbox run as one Ray task
on any node of a cluster, with the CPUs and memory ``[run.ray]`` declares for it.

Only the work moves: the supervisor(s), the proxy, the retry policy and every ledger row stay in
this process (the driver). A task gets the attempt's job (its instance, its proxy URL, the config)
and hands back an AgentEnding; the driver reads the proxy's rows and writes the end row as for a
local attempt, so one ledger writer and one retry policy serve both executors.

Ray never retries a task (``max_retries = 0``): an attempt whose worker died is the driver's to
decide, and it decides ``interrupted``/``worker_lost`` and a new attempt in a fresh sandbox, with
its own rows (runner/attempt.py), rather than a rerun the ledger would not see.

A task abandoned by the driver (a server restart ended the attempt, the run is stopping) is
cancelled: first gently, so it kills its commands and closes its sandbox (executors/ontask.py),
then, ``CANCEL_GRACE`` later, by killing its worker, whose watcher process kills its commands.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import logging
import signal
import threading
from typing import Any

from wedgewatch.base.errors import CarriedError, ExecutorError, WorkerLost
from wedgewatch.config import Config
from wedgewatch.runner.executors import AgentEnding, AttemptJob
from wedgewatch.runner.executors.ontask import run_attempt_task
from wedgewatch.runner.executors.raycluster import MIB, Cluster

log = logging.getLogger(__name__)

# Seconds a cancelled task gets to kill its commands and close its sandbox before its worker is
# killed (ontask.py needs well under a second when the commands die at once).
CANCEL_GRACE = 10.0
# Seconds ``stop`` waits for a start-up still under way (ray.init cannot be interrupted).
START_LIMIT = 300.0

Ref = Any  # a ray.ObjectRef


class RayExecutor:
    def __init__(self, cfg: Config) -> None:
        self._settings = cfg.run.ray
        self._cluster = Cluster(cfg.run.ray)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._remote: Any = None
        self._starting: concurrent.futures.Future[None] | None = None
        self._tasks: dict[Ref, concurrent.futures.Future[Any]] = {}  # not finished yet
        self._timers: list[asyncio.TimerHandle] = []
        self._told: set[Ref] = set()  # cancelled gently already: a second would cut its grace short

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._starting = self._cluster.submit(self._cluster.open)
        await asyncio.wrap_future(self._starting)
        _restore_signal_handlers()
        import ray

        self._remote = ray.remote(run_attempt_task)

    def submit(self, job: AttemptJob) -> asyncio.Future[AgentEnding]:
        loop = self._loop or asyncio.get_running_loop()
        options: dict[str, Any] = {
            "num_cpus": self._settings.num_cpus,
            "max_retries": 0,
            # Ray titles the worker process "ray::attempt:<id>" while it runs the task: which
            # process holds which attempt shows in ps, and in Ray's own tools.
            "name": f"attempt:{job.attempt_id}",
        }
        if self._settings.memory_mb:
            options["memory"] = self._settings.memory_mb * MIB
        try:
            ref = self._remote.options(**options).remote(job)
        except Exception as exc:  # the job could not be sent (pickling): ours, for every attempt
            raise ExecutorError(f"{job.attempt_id}: Ray could not take the attempt: {exc}") from exc
        landed = ref.future()
        self._tasks[ref] = landed
        fut: asyncio.Future[AgentEnding] = loop.create_future()

        def on_landed(_: concurrent.futures.Future[Any]) -> None:  # a thread of Ray's
            try:
                loop.call_soon_threadsafe(self._deliver, fut, ref, landed)
            except RuntimeError:
                pass  # the loop is closed: the run is over and nobody waits for this task

        landed.add_done_callback(on_landed)
        fut.add_done_callback(lambda _: self._abandon(ref) if ref in self._tasks else None)
        return fut

    def _deliver(
        self, fut: asyncio.Future[AgentEnding], ref: Ref, landed: concurrent.futures.Future[Any]
    ) -> None:
        self._tasks.pop(ref, None)
        self._told.discard(ref)
        if fut.done():
            return  # someone ended the attempt first; its late result is not read
        try:
            value = landed.result()
        except BaseException as exc:
            outcome = _translate(exc)
            if isinstance(outcome, AgentEnding):
                fut.set_result(outcome)
            else:
                fut.set_exception(outcome)
        else:
            fut.set_result(value)

    def _abandon(self, ref: Ref) -> None:
        """The driver is done with a task still running: cancel it gently now, by force later."""
        self._cancel(ref, force=False)
        assert self._loop is not None
        self._timers.append(self._loop.call_later(CANCEL_GRACE, self._cancel, ref, True))

    def _cancel(self, ref: Ref, force: bool) -> None:
        if ref not in self._tasks or not self._cluster.opened or (ref in self._told and not force):
            return
        if not force:
            self._told.add(ref)
        import ray

        try:
            ray.cancel(ref, force=force)
        except Exception as exc:  # already finished, or Ray is going away: nothing to cancel
            log.debug("cancelling %s: %s", ref, exc)

    async def stop(self) -> None:
        """Cancel what still runs (gently, then by force), then stop the local Ray or leave the
        cluster. Leaves no process of the run behind."""
        loop = asyncio.get_running_loop()
        try:
            if self._starting is not None and not self._starting.done():
                # Ctrl-C during ray.init: it cannot be interrupted; wait for it, then undo it.
                await loop.run_in_executor(None, concurrent.futures.wait, [self._starting], START_LIMIT)
            for timer in self._timers:
                timer.cancel()
            await self._cancel_running(loop)  # its locals (refs) are gone once it returns
            self._close_quietly()
        finally:
            self._cluster.release()

    async def _cancel_running(self, loop: asyncio.AbstractEventLoop) -> None:
        running = dict(self._tasks)
        for ref in running:
            self._cancel(ref, force=False)
        if running:
            landed = list(running.values())
            _, late = await loop.run_in_executor(None, concurrent.futures.wait, landed, CANCEL_GRACE)
            for ref, future in running.items():
                if future in late:
                    self._cancel(ref, force=True)
            log.info("cancelled %d Ray task(s) still running (%d by force)", len(running), len(late))

    def _close_quietly(self) -> None:
        """Stop or leave Ray with no ObjectRef dying meanwhile. A ref's destructor that reaches
        the core worker while ``ray.shutdown`` is tearing it down makes Ray quick-exit the whole
        process (seen once: a test process gone 150 ms after the shutdown, mid-run). So the refs
        are freed first, and the event loop's thread waits here, collector off, instead of
        running code that could drop one."""
        self._tasks.clear()
        self._told.clear()
        gc.collect()
        was = gc.isenabled()
        gc.disable()
        try:
            self._cluster.submit(self._cluster.close).result()
        finally:
            if was:
                gc.enable()


def _restore_signal_handlers() -> None:
    """Give SIGTERM and SIGINT back to the run. Ray's core worker, started by ray.init, installs
    its own handler for SIGTERM (it prints a stack trace, then dies by the signal), which would end
    the run before it marks its attempts, cancels its tasks and stops its server and Ray (seen:
    the commands and two Ray agents left running). Python still holds its handlers (asyncio's,
    the runner's): setting them again puts them back in front."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread receives Python's signals; a loop elsewhere set none
    for sig in (signal.SIGTERM, signal.SIGINT):
        handler = signal.getsignal(sig)
        if handler is not None:  # None: set outside Python, nothing of ours to restore
            signal.signal(sig, handler)


def _translate(exc: BaseException) -> AgentEnding | BaseException:
    """A task's failure, as the runner reads it: a dead worker or node is WorkerLost (the attempt
    ends ``interrupted`` and is attempted again); the task's own code failing is the attempt's
    harness error, as an exception in a local thread would be."""
    from ray import exceptions as rex

    if isinstance(exc, rex.TaskCancelledError):
        # Not by this run (its own cancels come after it stopped listening): someone cancelled
        # the task on the cluster. The attempt did not fail; it was taken away.
        return WorkerLost(f"the attempt's Ray task was cancelled outside the run: {exc}")
    if isinstance(exc, rex.RayTaskError):
        cause = getattr(exc, "cause", None) or exc
        return AgentEnding(exc=CarriedError.of(cause))
    if isinstance(exc, rex.RayError):
        # WorkerCrashedError, NodeDiedError, ObjectLostError, OutOfMemoryError (Ray's memory
        # monitor killed the worker), LocalRayletDiedError, ...: the process under the attempt
        # is gone.
        return WorkerLost(f"{type(exc).__name__}: {exc}")
    return exc
