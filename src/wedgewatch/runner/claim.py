"""Several runners on one run: which instance a worker takes next, and the claims that keep two
runners from doing one piece of work at once.

The claim of an attempt is its ``attempts`` row: ``(run_id, instance_id, attempt_no)`` is unique
(index ``attempts_claim``), and a runner numbers its attempt from ``instance_next``, which only
offers attempt N+1 once attempt N has its end. Two runners that read the same number both insert;
one gets ``LedgerConflict`` and leaves the instance to the other. So at most one attempt of an
instance is ever in flight, and the claim is itself the fact: nothing else to clean up when a
runner dies. An evaluation is claimed the same way, by its ``evaluation_starts`` row
``(attempt_id, eval_no)``, and only while no evaluation of that attempt is in flight on a live
runner.

On a one-writer ledger (SQLite) the dispenser hands out the run's unfinished instances once, as
it always did. On a shared one, a worker that runs out looks again: instances another runner
holds are waited for, and those of a dead runner (``lease.reap``) are taken over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from wedgewatch.base.errors import LedgerConflict, RunnerLost
from wedgewatch.runner import lease
from wedgewatch.runner.state import RunContext

log = logging.getLogger(__name__)


def evaluation(ctx: RunContext, attempt_id: str) -> int | None:
    """Claim the next evaluation of ``attempt_id``: its number, or None when an evaluation of it
    is in flight on a live runner, or another runner claimed this number first."""
    rows = ctx.ledger.query(
        "SELECT s.eval_no, s.runner_id, (SELECT COUNT(*) FROM evaluations e "
        "WHERE e.attempt_id = s.attempt_id AND e.eval_no = s.eval_no) AS done "
        "FROM evaluation_starts s WHERE s.attempt_id = ?",
        (attempt_id,),
    )
    running = {r["runner_id"] for r in rows if not r["done"]}
    if running:
        alive = {s.runner_id for s in lease.runners_of(ctx.ledger, ctx.run_id) if s.alive}
        if running & alive:
            return None
    # Numbered past every verdict too (imported ones, and those from before schema 6 carry none).
    n = ctx.ledger.query("SELECT COUNT(*) FROM evaluations WHERE attempt_id = ?", (attempt_id,))[0][0]
    eval_no = max([int(r["eval_no"]) for r in rows] + [int(n)]) + 1
    start = {
        "attempt_id": attempt_id,
        "eval_no": eval_no,
        "run_id": ctx.run_id,
        "runner_id": ctx.runner_id,
        "started_at": time.time(),
    }
    try:
        ctx.append("evaluation_starts", start)
    except LedgerConflict:
        return None
    return eval_no


class Dispenser:
    """The instances this runner's workers drive, one worker per instance at a time."""

    def __init__(self, ctx: RunContext, todo: list[str], lost: Callable[[], bool] = lambda: False) -> None:
        self.ctx = ctx
        self.queue = deque(todo)
        self.mine: set[str] = set()  # driven by a worker of this process now
        self.shared = ctx.ledger.shared
        self.poll = ctx.cfg.run.lease_interval
        self.lost = lost
        self.progress = True  # work was done since the last look at the ledger

    def check(self) -> None:
        if self.lost():
            raise RunnerLost(
                f"runner {self.ctx.runner_id}: another runner of run {self.ctx.run_id} found this "
                "one dead (its lease ran out) and took its attempts over; stopping"
            )

    async def take(self) -> str | None:
        """The next instance for a worker, or None when there is nothing left for this runner."""
        while True:
            self.check()
            while self.queue:
                iid = self.queue.popleft()
                if iid not in self.mine:
                    self.mine.add(iid)
                    return iid
            if not self.shared or not await self._look_again():
                return None

    def release(self, instance_id: str, worked: bool) -> None:
        self.mine.discard(instance_id)
        self.progress = self.progress or worked

    async def _look_again(self) -> bool:
        """Refill from the ledger; False once no instance of the run needs a runner any more."""
        if not self.progress:  # nothing done since the last look: do not spin on the database
            await asyncio.sleep(self.poll)
            self.check()
        self.progress = False
        lease.reap(self.ctx.ledger, self.ctx.run_id, by=self.ctx.runner_id)
        rows = self.ctx.ledger.query(
            "SELECT instance_id, next_action FROM instance_next WHERE run_id = ? "
            "AND next_action IS NOT NULL ORDER BY position",
            (self.ctx.run_id,),
        )
        # 'evaluate' with run.evaluate off awaits import-report: no runner will do it.
        left = [r[0] for r in rows if r[1] != "evaluate" or self.ctx.cfg.run.evaluate]
        if not left:
            return False
        queued = set(self.queue)
        self.queue.extend(i for i in left if i not in self.mine and i not in queued)
        return True

    async def watch(self, tasks: list[asyncio.Task[None]]) -> None:
        """Until the workers are done, every ``run.lease_interval``: raise RunnerLost as soon as
        this runner is found dead, so its attempts stop now rather than when each worker next asks
        for work; and end the attempts (and stop the servers) of runners that died, even while
        every worker here is busy: the record says so at once, and a server orphaned on this host
        does not hold its GPU until a worker is free."""
        pending: set[asyncio.Task[None]] = set(tasks)
        while pending:
            self.check()
            try:
                lease.reap(self.ctx.ledger, self.ctx.run_id, by=self.ctx.runner_id)
            except Exception as exc:  # the database away for a moment: the next turn reaps
                log.warning("reaping dead runners of %s: %s", self.ctx.run_id, exc)
            _, pending = await asyncio.wait(pending, timeout=self.poll)
