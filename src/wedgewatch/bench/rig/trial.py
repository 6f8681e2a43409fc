"""One fault of the corpus met for real (``bench/fault_corpus.py``): a supervised simulator behind
the watchdog proxy, every setting of wedgewatch at its default, a client that sends the fault's
prompt, and what came of it: the client's answer, the request's row, the supervisor's events and
the seconds from the fault striking (the simulator's own ``--fault-log``) to the client's release.

The SGLang rig runs the simulator's SGLang dialect under the real ``sglang`` profile, through a
two-line ``sglang.launch_server`` module of its own on ``PYTHONPATH`` (``write_sglang_shim``), so
the profile's argv, series and ``/health_generate`` canary are the ones a real SGLang gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

import wedgewatch
from wedgewatch.base.events import CanaryAnswered, Crashed, Event, LifeEnded, Restarting, Wedged
from wedgewatch.bench.fault_corpus import Fault
from wedgewatch.bench.rig import armed
from wedgewatch.bench.rig.client import Answer, ask, client_code, finish_reason, slow_body
from wedgewatch.config import ServerConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.stack.servers import Stack
from wedgewatch.supervisor.probes import ProbeResult
from wedgewatch.testing import eventually_async

REACTION_WAIT = 180.0
"""Seconds a trial waits for the supervisor's reactions (a hang guard: a livelock's canary and a
SIGKILL after ``stop_grace`` take about 25 s)."""
SLOTS_WAIT = 2.0
"""Seconds the /slots probe waits for an answer: a stuck server never gives one."""


@dataclass
class Trial:
    """What one trial of a fault came to."""

    fault: str
    status: int | None
    """The HTTP status the client got (None: no answer at all)."""
    client_code: str
    """The error code the client read ("" when it got the answer)."""
    outcome: str
    """The request's row in the ledger (its first leg's, when it was resumed)."""
    release: float | None
    """Seconds from the fault striking to the client's release (for a fault-free request, from
    its start; for the slow client, from its first byte)."""
    events: list[str] = field(default_factory=list)
    """The supervisor's event kinds that followed, in order."""
    evidence: dict[str, Any] = field(default_factory=dict)
    """The wedge's evidence, when there was one."""
    canary_passed: bool | None = None
    exit_code: int | None = None
    """The exit status of a server that ended by itself (a crash)."""
    old_exit: int | None = None
    """How the replaced life ended (-9: SIGKILL)."""
    missing: list[str] = field(default_factory=list)
    """Expected reactions that never came."""
    probe: dict[str, Any] = field(default_factory=dict)
    """What the server answered to the fault's probe while the fault held."""
    next_served: bool | None = None
    """After a restart: the next request was served."""
    legs: list[str] = field(default_factory=list)
    """The outcome of each leg of the request: one, or ``resumed`` and the legs that went on."""
    cause: str = ""
    """For a resumed request: the failure its first leg escaped."""
    finish: str = ""
    """The ``finish_reason`` the client's stream ended with ("" when none: an error ended it)."""

    def outcome_text(self) -> str:
        """The outcome, and for a resumed request what it escaped and how it ended."""
        if len(self.legs) > 1:
            return f"{self.legs[0]} ({self.cause}), then {' then '.join(self.legs[1:])}"
        return self.outcome

    def did(self) -> str:
        """What wedgewatch did, in a line."""
        if self.status is None:
            parts = ["no answer"]
        elif self.status != 200:
            parts = [f"HTTP {self.status} {self.client_code}".rstrip()]
        elif self.client_code:
            parts = [f"200, stream ends with error {self.client_code}"]
        else:
            parts = ["200, the whole answer" + (", resumed on the next life" if len(self.legs) > 1 else "")]
        for kind in self.events:
            if kind == Wedged.kind:
                parts.append(f"wedge ({self.evidence.get('rule') or self.evidence.get('source')})")
            elif kind == CanaryAnswered.kind:
                parts.append("canary passed" if self.canary_passed else "canary failed")
            elif kind == Crashed.kind:
                parts.append(f"exit status {self.exit_code} seen")
            elif kind == Restarting.kind:
                killed = " (SIGKILL after stop_grace)" if self.old_exit == -9 else ""
                parts.append(f"{Restarting.kind}{killed}")
        if not any(k in (Wedged.kind, Crashed.kind, Restarting.kind) for k in self.events):
            parts.append("no restart")
        return "; ".join(parts)


def write_sglang_shim(folder: Path) -> Path:
    """A ``sglang.launch_server`` module that starts ``wedgewatch sim --dialect sglang`` with the
    arguments the ``sglang`` profile gives (the simulator ignores the flags it does not know)."""
    pkg = folder / "sglang"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(
        "import sys\nfrom wedgewatch.cli import main\n\nmain(['sim', '--dialect', 'sglang', *sys.argv[1:]])\n"
    )
    return folder


def scenario_file(fault: Fault, workdir: Path) -> Path:
    """The fault's bundled scenario with each fault striking once across server lives (a marker
    file, ``workdir/struck``, that the rig removes before each trial): the next life does not
    repeat the fault, as a fresh server is the cure, so a request the proxy resumes there is
    served (docs/faults.md)."""
    text = (resources.files("wedgewatch.sim") / "scenarios" / f"{fault.scenario}.toml").read_text()
    path = workdir / f"{fault.scenario}.toml"
    path.write_text(armed.with_marker(text, workdir / "struck"))
    return path


def server_config(fault: Fault, workdir: Path, fault_log: Path) -> ServerConfig:
    """The fault's server at wedgewatch's defaults: only where logs go, and the simulator's own
    arguments (its scenario, speed, context length and fault log), are set."""
    scenario = str(scenario_file(fault, workdir))
    sim_args = ["--max-model-len", "131072", "--fault-log", str(fault_log)]
    if fault.rig == "sglang":
        here = str(Path(wedgewatch.__file__).resolve().parent.parent)
        path = [str(write_sglang_shim(workdir / "shim")), here, os.environ.get("PYTHONPATH", "")]
        return ServerConfig(
            profile="sglang",
            launcher=sys.executable,
            log_dir=str(workdir / "logs"),
            env={"PYTHONPATH": os.pathsep.join(p for p in path if p)},
            args=["--scenario", scenario, "--time-scale", repr(fault.time_scale), *sim_args],
        )
    return ServerConfig(
        profile="sim",
        scenario=scenario,
        time_scale=fault.time_scale,
        log_dir=str(workdir / "logs"),
        args=sim_args,
    )


class FaultRig:
    """``async with FaultRig(fault, workdir) as rig: trial = await rig.trial()``."""

    def __init__(self, fault: Fault, workdir: Path) -> None:
        self.fault = fault
        workdir.mkdir(parents=True, exist_ok=True)
        self.fault_log = workdir / "faults.jsonl"
        self.marker = workdir / "struck"
        self.ledger = Ledger(workdir / "ledger.sqlite")
        self.stack = Stack(
            server_config(fault, workdir, self.fault_log), WatchdogConfig(), ledger=self.ledger
        )
        self.events: list[Event] = []
        self.trials = 0
        self.stack.bus.subscribe(self.events.append)

    async def __aenter__(self) -> FaultRig:
        try:
            await self.stack.start()
        except BaseException:
            self.ledger.close()
            raise
        return self

    async def __aexit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.stack.stop()
        finally:
            self.ledger.close()

    async def trial(self, fault: Fault | None = None) -> Trial:
        """Meet the fault once; return when the supervisor has done all it was going to.
        ``fault``: another fault the same server shows (the broken replies share one scenario)."""
        if fault is not None:
            if (fault.scenario, fault.rig) != (self.fault.scenario, self.fault.rig):
                raise ValueError(f"{fault.name} needs scenario {fault.scenario}, not {self.fault.scenario}")
            self.fault = fault
        sup = self.stack.supervisor
        await sup.wait_ready()
        life, server = sup.life_id, sup.base_url
        self.marker.unlink(missing_ok=True)  # armed: the fault strikes once in this trial
        mark, t0 = len(self.events), time.time()
        async with aiohttp.ClientSession() as session:
            if self.fault.rig == "client":
                answer = await slow_body(self.stack.url)
                probe: dict[str, Any] = {}
            else:
                prober = asyncio.ensure_future(self._probe(session, server))
                # A word of its own per trial: no prefix-cache hit shortens a later trial's prefill.
                self.trials += 1
                text = f"{self.fault.prompt} trial{self.trials}" + " x" * self.fault.fill
                answer = await ask(session, self.stack.url, text)
                probe = await prober
            legs = await self._legs(answer)
            first = legs[0][0] if legs else ""
            trial = Trial(self.fault.name, answer.status, client_code(answer), first, None)
            trial.legs = [outcome for outcome, _ in legs]
            trial.cause = str(legs[0][1].get("cause", "")) if legs else ""
            trial.finish = finish_reason(answer)
            trial.probe = probe
            trial.release = answer.ended - self._struck(t0)
            await self._reactions(trial, mark)
            if Restarting.kind in trial.events:
                await eventually_async(
                    lambda: sup.life_id not in (None, life), REACTION_WAIT, what="a new life"
                )
                await sup.wait_ready()
                trial.next_served = (await ask(session, self.stack.url, "and now?", 8)).status == 200
        # The old life's end is published once its group is gone, before the new life starts.
        ends = [e for e in self.events[mark:] if isinstance(e, LifeEnded) and e.life_id == life]
        trial.old_exit = ends[0].exit_code if ends else None
        return trial

    async def _legs(self, answer: Answer) -> list[tuple[str, dict[str, Any]]]:
        """(outcome, detail) of the request's row and of each leg that resumed it, in order (each
        row is written before the client's last byte; a moment's grace)."""
        legs: list[tuple[str, dict[str, Any]]] = []
        rid = answer.request_id
        query = "SELECT outcome, detail_json FROM requests WHERE request_id = ?"
        while rid is not None and len(legs) < 10:

            def row(rid: str = rid) -> list[Any]:
                return list(self.ledger.query(query, (rid,)))

            try:
                ((outcome, detail),) = await eventually_async(row, 10.0, what="the request's row")
            except AssertionError:
                break
            legs.append((str(outcome), json.loads(detail or "{}")))
            nxt = legs[-1][1].get("resumed_as")
            rid = str(nxt) if nxt else None
        return legs

    def _struck(self, t0: float) -> float:
        """When the fault struck: the simulator's first fault-log line of this trial."""
        if self.fault.rig == "vllm" and self.fault_log.exists():
            for line in self.fault_log.read_text().splitlines():
                ts = float(json.loads(line)["ts"])
                if ts >= t0:
                    return ts
        return t0  # no fault (SGLang's prefill) or the client's own: from the request's start

    async def _reactions(self, trial: Trial, mark: int) -> None:
        """Wait for each expected reaction (a hang guard bounds it), then read them all."""
        wanted = self.fault.reactions

        def seen() -> list[Event]:
            return self.events[mark:]

        def complete() -> bool:
            return all(any(isinstance(e, w) for e in seen()) for w in wanted)

        with contextlib.suppress(AssertionError):
            await eventually_async(complete, REACTION_WAIT, what="the supervisor's reactions")
        trial.missing = [w.kind for w in wanted if not any(isinstance(e, w) for e in seen())]
        for ev in seen():
            if isinstance(ev, Wedged | CanaryAnswered | Crashed | Restarting):
                trial.events.append(ev.kind)
            if isinstance(ev, Wedged):
                trial.evidence = dict(ev.evidence)
            elif isinstance(ev, CanaryAnswered):
                trial.canary_passed = ProbeResult(**ev.result).ok
            elif isinstance(ev, Crashed):
                trial.exit_code = ev.exit_code

    async def _probe(self, session: aiohttp.ClientSession, server: str) -> dict[str, Any]:
        """Ask the server what the fault's report says it showed, while the fault holds."""
        kind = self.fault.probe
        if not kind:
            return {}
        if self.fault.rig == "sglang":
            return {"health": await _health_while_busy(session, server)}
        if not await _until_struck(session, server):
            return {"struck": False}
        out: dict[str, Any] = {"health": await _get(session, server + "/health", 30.0)}
        if kind == "slots":
            out["slots"] = await _get(session, server + "/slots", SLOTS_WAIT)
        return out


async def _stats(session: aiohttp.ClientSession, server: str) -> dict[str, Any]:
    try:
        async with session.get(server + "/sim/stats", timeout=aiohttp.ClientTimeout(total=5)) as resp:
            stats: dict[str, Any] = await resp.json()
            return stats
    except (aiohttp.ClientError, TimeoutError):
        return {}


async def _until_struck(session: aiohttp.ClientSession, server: str) -> bool:
    """Wait until the simulator says its engine is wedged or livelocked."""

    async def struck() -> bool:
        s = await _stats(session, server)
        return bool(s.get("wedged") or s.get("livelocked"))

    return await _until(struck, "the fault to strike")


async def _until(predicate: Callable[[], Awaitable[bool]], what: str) -> bool:
    """Whether ``predicate`` came true within a minute (a hang guard)."""
    with contextlib.suppress(AssertionError):
        return await eventually_async(predicate, 60.0, what=what)
    return False


async def _get(session: aiohttp.ClientSession, url: str, wait: float) -> int | str:
    """The status of GET ``url``, or "no answer" when none came within ``wait`` seconds."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=wait)) as resp:
            return resp.status
    except TimeoutError:
        return "no answer"
    except aiohttp.ClientError as exc:
        return type(exc).__name__


async def _health_while_busy(session: aiohttp.ClientSession, server: str) -> list[int | str]:
    """/health, again and again, from the request's admission until the server has none: the
    answers a Kubernetes probe would have had during it."""

    async def admitted() -> bool:
        s = await _stats(session, server)
        return int(s.get("in_flight", 0)) > 0

    await _until(admitted, "the request upstream")
    answers: list[int | str] = []
    while int((await _stats(session, server)).get("in_flight", 0)) > 0:
        answers.append(await _get(session, server + "/health", 60.0))
    return answers
