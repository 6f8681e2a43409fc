"""What a Ray task runs for one attempt, on whichever worker Ray picked: ``work(job)`` (the same
function as the local executor's thread), with the attempt's commands on a list of its own that a
watcher process guards. Ray is not imported here: cloudpickle sends this function by reference,
and the worker has Ray loaded already.

Why a thread inside the task: Ray cancels a running task (``ray.cancel``, not forced) by raising
KeyboardInterrupt in the worker's main thread, and Python only raises it between bytecodes; an
agent blocked for minutes in a socket read or a command's wait would not see it. So the work runs
in a thread and the task's main thread only waits, a few times a second: cancelled, it kills the
attempt's commands at once (their groups, as the local executor's run does on a stop), gives the
work a moment to close its sandbox, and ends.

Why a watcher (``sandbox.reaper``): a forced cancel, a shutdown, Ray's memory monitor or a lost
raylet end the worker with SIGKILL, which no code in it survives, and the commands run in sessions
of their own that Ray's cleanup of the worker's process group does not reach."""

from __future__ import annotations

import contextvars
import os
import signal
import socket
import threading

from wedgewatch.base.errors import CarriedError
from wedgewatch.runner.executors import AgentEnding, AttemptJob
from wedgewatch.runner.executors.work import work
from wedgewatch.sandbox import groups
from wedgewatch.sandbox.reaper import Reaper

# Seconds between the main thread's looks for a cancellation: Ray's KeyboardInterrupt lands within
# this, and an idle task costs five wake-ups a second.
POLL = 0.2
# Seconds a cancelled attempt's work gets to close its sandbox once its commands are killed.
CLOSE_GRACE = 10.0


def run_attempt_task(job: AttemptJob) -> AgentEnding:
    """The body of one attempt's Ray task; returns what the driver needs to write its end row."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Ray's gentle cancel is a simulated SIGINT in this thread, which does nothing while SIGINT
        # is ignored, and a worker inherits that from a runner started in the background of a
        # script (`wedgewatch run ... &`, nohup): every cancel would wait for the forced one.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    reaper = Reaper()
    own = groups.Groups(watcher=reaper)
    box: list[AgentEnding] = []
    done = threading.Event()

    def target() -> None:
        try:
            box.append(work(job))
        finally:
            done.set()

    try:
        with groups.scope(own):
            context = contextvars.copy_context()  # the work's commands go on ``own``
        threading.Thread(
            target=context.run, args=(target,), name=f"attempt-{job.attempt_id}", daemon=True
        ).start()
        try:
            while not done.wait(POLL):
                pass
        except BaseException:  # KeyboardInterrupt: ray.cancel; SystemExit: the worker is exiting
            own.close()  # its commands die now, and it can start no more
            done.wait(CLOSE_GRACE)
            raise
    finally:
        own.close()
        reaper.stop()
    ending = box[0]
    if ending.exc is not None:
        # Not every exception survives pickling (or keeps its reason through it): carry what the
        # driver's retry policy reads, decided here where it was raised.
        ending.exc = CarriedError.of(ending.exc)
    ending.worker = _where()
    return ending


def _where() -> dict[str, str | int]:
    """Which node and process ran the attempt: the end row keeps it (a lost node's attempts, a
    slow one's, are then traceable)."""
    where: dict[str, str | int] = {"host": socket.gethostname(), "pid": os.getpid()}
    try:
        import ray

        where["node_id"] = ray.get_runtime_context().get_node_id()
    except Exception:  # outside a Ray worker (a test calling this directly): host and pid suffice
        pass
    return where
