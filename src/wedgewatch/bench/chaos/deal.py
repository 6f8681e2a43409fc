"""Dealing one fault of a schedule to a run in progress (``table.py`` is the run as the rig sees
it, and the waits), and waiting until the run serves again: each kind of ``kinds.py`` done with
the rig's strikes (``bench/rig``), or with the simulator's own faults, armed from outside.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from wedgewatch.base import vocab
from wedgewatch.bench.chaos.engines import SIM, VLLM_CPU
from wedgewatch.bench.chaos.kinds import KINDS, Planned
from wedgewatch.bench.chaos.table import Dealt, Finished, Table
from wedgewatch.bench.rig import progress, strikes
from wedgewatch.bench.rig.armed import struck

ARMED: dict[str, dict[str, Any]] = {
    "freeze": {"action": vocab.WEDGE},
    "kill_engine": {"action": vocab.CRASH, "exit_code": 1},
    "exit_zero": {"action": vocab.CRASH, "exit_code": 0, "error_event": True},
    "engine_error": {"action": vocab.CRASH, "exit_code": 1, "error_event": True},
}
"""The simulator's kinds played by its own faults, armed from outside (``bench/rig/armed.py``):
the engine wedged; the engine dead: the connection cut and an exit with status 1, or vLLM's
EngineDeadError (its error event in the stream, then the API server's exit, with status 1 or
0)."""


STRIKE_WAIT = 60.0
"""Seconds an armed simulator fault a request met has to strike (its own log says when)."""

SANDBOX_WAIT = 300.0
"""Seconds ``kill_sandbox`` waits for a command to run in a sandbox."""


def armed_faults(schedule: list[Planned]) -> dict[str, dict[str, Any]]:
    """One armed simulator fault per fault of ``schedule`` the simulator plays (named ``f<n>``,
    and ``f<n>b`` for the second of a pair), striking ``after_tokens`` into a reply."""
    out: dict[str, dict[str, Any]] = {}
    for p in schedule:
        first = {"kill_then_freeze": "", "freeze_then_kill_runner": "freeze"}.get(p.kind, p.kind)
        if first in ARMED:
            out[f"f{p.n}"] = {**ARMED[first], "after_tokens": p.after_tokens}
        if p.kind == "kill_then_freeze":
            out[f"f{p.n}b"] = {**ARMED["freeze"], "after_tokens": 1}
    return out


class Dealer(Table):
    """The table, and the ways to strike the run on it (``bench/rig/strikes.py``)."""

    # --- dealing -------------------------------------------------------------------------------

    async def _signal(self, d: Dealt, life: progress.Life, role: str, sig: int) -> bool:
        pid = self._pid(life, role)
        if pid is None or not strikes.send(pid, sig):
            d.did.append(f"no {role} process to signal")
            return False
        d.at, d.life_id = d.at or time.time(), d.life_id or life.life_id
        d.lives.append(life.life_id)
        d.did.append(f"{signal.Signals(sig).name} {role} {pid}")
        return True

    async def _arm(self, d: Dealt, name: str, timeout: float) -> bool:
        """Arm the simulator's fault ``name``; wait until a request meets it and it strikes (the
        simulator's fault log names the process, so the life it struck)."""
        fault, since = self.armed[name], time.time()
        fault.arm()
        d.did.append(f"armed the simulator's {name} fault")
        if not await self.until(lambda: not fault.armed, timeout):
            fault.disarm()
            d.skipped = "no request met it"
            return False
        # Met, it strikes at most ``after_tokens`` into the reply (the simulator cuts a shorter one
        # a token before its end); a busy machine may take seconds to get there.
        await self.until(lambda: bool(struck(self.fault_log, since)), STRIKE_WAIT)
        hits = struck(self.fault_log, since)
        if not hits:
            d.skipped = "the reply it met ended before it struck"
            return False
        d.at = float(hits[0]["ts"])
        d.did.append(f"struck after {hits[0]['tokens']} tokens")
        life = next((lv for lv in self.record.lives() if lv.pid == int(hits[0]["pid"])), None)
        if life is not None:
            d.life_id = d.life_id or life.life_id
            d.lives.append(life.life_id)
        return True

    async def _engine_fault(self, d: Dealt, kind: str, after: int, avoid: set[str], name: str) -> bool:
        """One engine fault, in flight (``name``: the simulator's armed fault that plays it)."""
        if self.engine.name == SIM and kind in ARMED:
            return await self._arm(d, name, self.settle_timeout)
        found = await self.in_flight(after, self.settle_timeout, avoid)
        if found is None:
            d.skipped = "no request in flight before the run ended or the wait did"
            return False
        life, reading = found
        d.tokens, d.running = self.progress.tokens, reading.running
        if kind == "freeze":
            return await self._signal(d, life, "engine", signal.SIGSTOP)
        if kind == "slow":
            pid = self._pid(life, "engine")
            if pid is None:
                return False
            d.at, d.life_id = time.time(), life.life_id
            d.lives.append(life.life_id)
            bursts = await strikes.slow(pid, 10, 0.5, 0.5)
            d.did.append(f"{bursts} bursts of SIGSTOP 0.5 s / SIGCONT 0.5 s on {pid}")
            return bursts > 0
        if kind == "kill_engine":
            return await self._signal(
                d, life, "engine" if self.engine.name == VLLM_CPU else "server", signal.SIGKILL
            )
        if kind == "kill_server":
            return await self._signal(d, life, "server", signal.SIGKILL)
        if kind == "exit_zero":
            return await self._signal(d, life, "server", signal.SIGTERM)
        if kind == "engine_error":
            return await self._signal(d, life, "worker", signal.SIGSTOP)
        if kind == "conn_reset":
            d.at, d.life_id = time.time(), life.life_id
            d.lives.append(life.life_id)
            n = strikes.reset_connections(life.port)
            d.did.append(f"reset {n} connections to port {life.port}")
            return n > 0
        raise ValueError(kind)

    async def kill_runner(self, d: Dealt) -> None:
        life = self.record.serving()
        d.at = d.at or time.time()
        if life is not None:
            d.life_id = d.life_id or life.life_id
            d.lives.append(life.life_id)
        d.did.append(f"SIGKILL of `wedgewatch run` (group {self.run.pid})")
        self.killed_by_us = True
        self.run.kill()

    async def deal(self, p: Planned) -> Dealt:
        """Deal ``p`` once it is due; what became of it (after the run settled) is appended to
        ``dealt``, also when the run finished meanwhile (``Finished`` then goes on up)."""
        d = Dealt(p)
        self.dealt.append(d)
        try:
            return await self._deal(d)
        except Finished:
            if d.at is None:
                d.skipped = d.skipped or "the run finished first"
            raise

    async def _deal(self, d: Dealt) -> Dealt:
        p = d.planned
        kind = KINDS[p.kind]
        if not await self.due(p, 24 * 3600):
            d.skipped = "not reached"
            return d
        d.tokens = self.progress.tokens
        self.run.sample(f"before #{p.n}")
        if kind.side != "wedgewatch" and kind.name not in ("kill_then_freeze", "freeze_then_kill_runner"):
            await self._engine_fault(d, p.kind, p.after_tokens, set(), f"f{p.n}")
        elif p.kind == "kill_then_freeze":
            if await self._engine_fault(d, "kill_server", p.after_tokens, set(), ""):
                await self._freeze_next(d, set(d.lives), f"f{p.n}b")
        elif p.kind == "freeze_then_kill_runner":
            if await self._engine_fault(d, "freeze", p.after_tokens, set(), f"f{p.n}"):
                life_id = d.life_id or ""
                verdict = await self.until(lambda: self._verdict(life_id), self.settle_timeout)
                d.did.append("the wedge's verdict is in" if verdict else "no verdict came")
                await self.kill_runner(d)
        elif p.kind == "kill_runner":
            await self.kill_runner(d)
        elif p.kind == "kill_sandbox":
            await self._kill_sandbox(d)
        elif p.kind == "disk_full":
            await self._disk_full(d, p.hold)
        elif p.kind == "file_size":
            await self._file_size(d, p.hold)
        if d.at is None and not d.skipped:
            d.skipped = "; ".join(d.did) or "nothing to strike"
        if d.at is not None:
            await self.settle(d)
        self.mark = self.progress.tokens
        return d

    async def _freeze_next(self, d: Dealt, gone: set[str], name: str) -> None:
        """Freeze the life that replaces those in ``gone`` while it starts: the simulator's wedge
        is armed at once (its readiness canary, warm-up or first request meets it); a real
        engine's process is stopped as soon as it exists."""
        if self.engine.name == SIM:
            fault = self.armed[name]
            fault.arm()
            d.did.append(f"armed the simulator's {name} fault for the next life")
            if await self.until(lambda: not fault.armed, self.settle_timeout):
                nxt = [lv for lv in self.record.lives() if lv.life_id not in gone]
                if nxt:
                    d.lives.append(nxt[-1].life_id)
                hits = struck(self.fault_log, d.at or 0.0)
                d.did.append(f"it struck: {hits[-1]['last_user'][:40]!r}" if hits else "it never struck")
            else:
                fault.disarm()
            return
        found: list[tuple[progress.Life, int]] = []

        def starting() -> bool:
            for life in self.record.lives():
                pid = (
                    self._pid(life, "engine") if life.life_id not in gone and life.ended_at is None else None
                )
                if pid is not None:
                    found[:] = [(life, pid)]
                    return True
            return False

        if await self.until(starting, self.settle_timeout):
            life, pid = found[0]
            strikes.send(pid, signal.SIGSTOP)
            d.lives.append(life.life_id)
            ready = "ready" if life.ready_at else "not yet ready"
            d.did.append(f"SIGSTOP engine {pid} of the next life ({ready})")

    async def _kill_sandbox(self, d: Dealt) -> None:
        found: list[int] = []

        def running() -> bool:
            found[:] = strikes.in_sandbox(self.workdir)
            return bool(found)

        # A model that rarely writes a command (the bundled Gemma) may run none for a long time.
        if not await self.until(running, min(self.settle_timeout, SANDBOX_WAIT)):
            d.skipped = f"no sandbox command ran within {SANDBOX_WAIT:.0f} s"
            return
        d.at = time.time()
        life = self.record.serving()
        d.life_id = life.life_id if life else None
        killed = [g for g in found if strikes.kill_group(g)]
        d.did.append(f"SIGKILL of sandbox process group(s) {killed}")

    async def _disk_full(self, d: Dealt, hold: float) -> None:
        if self.disk is None:
            d.skipped = "the ledger has no file system of its own (needs root)"
            return
        d.at = time.time()
        n = self.disk.fill()
        d.did.append(f"filled the ledger's file system ({n >> 20} MiB) for {hold} s")
        await self.until(lambda: False, hold)
        self.disk.free()

    async def _file_size(self, d: Dealt, hold: float) -> None:
        pid = self.run.pid
        if pid is None:
            d.skipped = "no runner"
            return
        # The next write that grows the ledger (its file or its WAL) fails; so does any other file
        # of the process past that size (its own log), as a real limit would.
        sizes = [p.stat().st_size for p in (self.ledger, Path(str(self.ledger) + "-wal")) if p.exists()]
        limit = max(sizes, default=0) or 1 << 20
        old = strikes.limit_file_size(pid, limit)
        d.at = time.time()
        d.did.append(f"RLIMIT_FSIZE of `wedgewatch run` ({pid}) set to {limit} bytes for {hold} s")
        await self.until(lambda: False, hold)
        if not strikes.restore_file_size(pid, old):
            d.did.append("the runner was gone when the limit was lifted")
