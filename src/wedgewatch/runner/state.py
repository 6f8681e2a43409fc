"""A run's live state in this process: the effective config, the ledger, the servers and the
proxy, the attempts in flight, and the counters the progress display reads (display only: every
decision reads the ledger)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wedgewatch.base.protocols import SandboxFactory, ServerSide
from wedgewatch.config import Config
from wedgewatch.ledger.store import Ledger
from wedgewatch.runner.executors import AgentEnding, Executor
from wedgewatch.runner.timings import Timings


@dataclass(frozen=True, slots=True)
class Instance:
    """One instance of the run: its id, its place in the suite, its SWE-bench record."""

    instance_id: str
    position: int
    record: dict[str, Any]


@dataclass(eq=False)
class InFlight:
    """One attempt whose end row is not written yet."""

    attempt_id: str
    instance_id: str
    life_id: str | None
    started: float
    done: asyncio.Future[AgentEnding]
    # Set when someone other than the attempt's own worker ended it (a server restart, a stop).
    ended_by: tuple[str, str] | None = None


@dataclass
class Counters:
    """For the progress display only."""

    total: int = 0
    final_before: int = 0  # instances already final when this execution began (resume)
    done: int = 0
    running: int = 0
    retried: int = 0
    attempts: int = 0
    api_errors: int = 0
    stalls: int = 0
    restarts: int = 0
    evaluations: int = 0


@dataclass
class RunContext:
    cfg: Config  # effective (time-scaled) config
    ledger: Ledger
    run_id: str
    workdir: Path  # <run.workdir>/<run_id>
    proxy_url: str
    server: ServerSide
    make_sandbox: SandboxFactory
    is_infra: Callable[[str], bool]
    inflight: dict[str, InFlight] = field(default_factory=dict)
    counters: Counters = field(default_factory=Counters)
    timings: Timings = field(default_factory=Timings)
    loop: asyncio.AbstractEventLoop | None = None
    executor: Executor | None = None  # None: the local executor (runner/executors/local.py)
    lost_workers: dict[str, int] = field(default_factory=dict)  # instance_id -> in this execution
    runner_id: str | None = None  # this process's row in `runners` (runner/lease.py)
    agent_key: str = "wedgewatch"  # what the agents present to the proxy (a key when it needs one)

    def agent_base_url(self, attempt_id: str) -> str:
        """Where the attempt's agent sends its requests: its own path on the proxy, or (without
        the proxy) the current server life itself, unattributed."""
        if self.proxy_url:
            return f"{self.proxy_url}/a/{attempt_id}/v1"
        return f"{self.server.base_url}/v1"

    def append(self, table: str, row: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        self.ledger.append(table, row)
        self.timings.add_write(time.perf_counter() - t0)

    def instance(self, instance_id: str) -> Instance:
        """The instance as the run loaded it, read from the ledger when its turn comes (the
        suite is not held in memory: a run of 2,000 instances costs what one of 200 does)."""
        row = self.ledger.query(
            "SELECT position, instance_json FROM run_instances WHERE run_id = ? AND instance_id = ?",
            (self.run_id, instance_id),
        )[0]
        return Instance(instance_id, int(row["position"]), json.loads(row["instance_json"]))

    def attempt_id(self, instance: Instance, attempt_no: int) -> str:
        # Safe in a URL path (the proxy's /a/<attempt_id>/v1) whatever the instance id holds.
        return f"{self.run_id}-{instance.position}-{attempt_no}"
