"""The run on the rig's table, as ``bench chaos`` watches it: its process (resumed with ``run
--resume`` whenever it ends by itself), its ledger read from outside, its serving life's progress
(``bench/rig/progress.py``), and the waits every fault is dealt between: due on token progress,
a request in flight, the run serving again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from wedgewatch.base import vocab
from wedgewatch.bench.chaos.engines import SIM, VLLM_CPU, Engine
from wedgewatch.bench.chaos.kinds import LETHAL, Planned
from wedgewatch.bench.chaos.process import RunProcess
from wedgewatch.bench.rig import progress, strikes
from wedgewatch.bench.rig.armed import Armed


class Finished(Exception):
    """The run finished (exit 0) while the rig waited."""


@dataclass
class Dealt:
    """What became of one planned fault."""

    planned: Planned
    at: float | None = None
    """When it struck (the simulator's own fault log for its armed faults)."""
    life_id: str | None = None
    tokens: float = 0.0
    """The run's progress when it was dealt."""
    running: float = 0.0
    """Requests running on the engine when it struck (its gauge)."""
    did: list[str] = field(default_factory=list)
    skipped: str = ""
    settled: float | None = None
    """Seconds from the strike until the run served again (a ready life, a live runner)."""
    lives: list[str] = field(default_factory=list)
    """Every life it struck (two for a pair)."""

    def to_json(self) -> dict[str, Any]:
        return {
            **self.planned.to_json(),
            "at": self.at,
            "life_id": self.life_id,
            "tokens": round(self.tokens),
            "busy": self.running,
            "did": self.did,
            "skipped": self.skipped,
            "settled": None if self.settled is None else round(self.settled, 2),
            "lives": self.lives,
        }


class Table:
    """The run on the rig's table: its process, its ledger, its progress, and the waits."""

    def __init__(
        self,
        engine: Engine,
        run: RunProcess,
        ledger: Path,
        workdir: Path,
        session: aiohttp.ClientSession,
        armed: dict[str, Armed],
        fault_log: Path,
        disk: strikes.LedgerDisk | None,
        settle_timeout: float,
    ) -> None:
        self.engine, self.run, self.ledger, self.workdir = engine, run, ledger, workdir
        self.session, self.armed, self.fault_log, self.disk = session, armed, fault_log, disk
        self.record = progress.Record(ledger)
        self.progress = progress.Progress()
        self.settle_timeout = settle_timeout
        self.interval = 0.05 if engine.name == SIM else 0.1
        self.killed_by_us = False
        self.dealt: list[Dealt] = []
        self.mark = 0.0
        """The run's progress when the last fault was dealt and the run served again."""
        self.marks = 0.0
        """The schedule's gaps so far: no fault is due later than its own mark."""

    # --- watching ------------------------------------------------------------------------------

    def check_runner(self) -> None:
        """Resume a run whose process ended by itself; ``Finished`` once it finished."""
        if self.run.exited() is None:
            return
        if self.run.finished():
            raise Finished
        if not self.killed_by_us:
            self.run.note_death()
        self.killed_by_us = False
        self.run.start()

    async def poll(self) -> tuple[progress.Life | None, progress.Reading | None]:
        self.check_runner()
        life = self.record.serving()
        if life is None:
            return None, None
        reading = await progress.read(
            self.session, life.base_url, self.engine.counter, self.engine.gauge, 1.0
        )
        if reading is not None:
            self.progress.update(life.life_id, reading)
        return life, reading

    async def until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Poll until ``done()`` (False after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            await self.poll()
            if done():
                return True
            await asyncio.sleep(self.interval)
        return False

    async def in_flight(
        self, after_tokens: int, timeout: float, avoid: set[str] | None = None
    ) -> tuple[progress.Life, progress.Reading] | None:
        """A serving life (not one of ``avoid``) with a request running that has generated
        ``after_tokens`` tokens since the rig first saw it running."""
        base: tuple[str, float] | None = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            life, r = await self.poll()
            if life is None or r is None or r.running < 1 or life.life_id in (avoid or set()):
                base = None
            elif base is None or base[0] != life.life_id:
                base = (life.life_id, r.tokens)
            elif r.tokens - base[1] >= after_tokens:
                return life, r
            await asyncio.sleep(self.interval)
        return None

    async def due(self, p: Planned, timeout: float) -> bool:
        """Wait until the run has generated the fault's gap of tokens since the last one settled,
        or its mark in the schedule, whichever comes first (``kinds.py``: a fault's own wait, a
        disk held full while the run goes on, never pushes the schedule past the run's end)."""
        self.marks += p.gap_tokens
        mark = min(self.mark + p.gap_tokens, self.marks)
        return await self.until(lambda: self.progress.tokens >= mark, timeout)

    async def settle(self, d: Dealt) -> None:
        """Wait until the run serves again: a live runner and a ready life other than those the
        fault killed; ``d.settled`` stays None when it did not within the settle timeout."""
        gone = set(d.lives) if d.planned.kind in LETHAL else set()
        t0 = d.at or time.time()

        def serving() -> bool:
            life = self.record.serving()
            return self.run.pid is not None and life is not None and life.life_id not in gone

        if await self.until(serving, self.settle_timeout):
            d.settled = time.time() - t0
        self.run.sample(f"after #{d.planned.n}")

    def _pid(self, life: progress.Life, role: str) -> int | None:
        """The process a kind strikes: vLLM's EngineCore or Worker, else the server itself."""
        if life.pid is None:
            return None
        if self.engine.name == VLLM_CPU and role != "server":
            return strikes.titled(
                life.pid, strikes.ENGINE_TITLE if role == "engine" else strikes.WORKER_TITLE
            )
        return life.pid

    def _verdict(self, life_id: str) -> bool:
        rows = self.record.rows(
            "SELECT 1 FROM events WHERE kind = ? AND life_id = ? UNION ALL"
            " SELECT 1 FROM server_life_ends WHERE life_id = ?",
            (vocab.WEDGE, life_id, life_id),
        )
        return bool(rows)
