"""``wedgewatch bench resume``: how many tasks one wedge costs a harness, with the proxy's resume on
(``[watchdog] on_wedge = "resume"``, the default) and off (``"fail"``), side by side in one run,
and what a resumed task pays for it in wall-clock.

Each trial is a supervised simulator behind the proxy, every wedgewatch setting at its default,
and the harness of ``resume_harness.py``: 16 tasks of two requests, 8 at a time. The simulator
wedges once, a few tokens into the first request of the task that starts once the first 8 are
under way (a scenario fault with a ``marker``: it strikes once across server lives), so the
wedged life holds the requests of several tasks in every shape, begun streams among them. The
arms alternate trial by trial. A task is lost when a request of it raised; a task was struck when
a request of it was on the wedged life when the supervisor replaced it (its row ``resumed``, or
failed). A struck task's added wall-clock is its duration less the median of the untouched tasks
of its shape in the same trial; it is made of the detection (from the strike, the simulator's
own fault log, to the supervisor's wedge verdict), the restart (from the verdict to the next
life ready) and the rest: the request going on on the next life.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wedgewatch.base import vocab
from wedgewatch.base.events import Event, ServerReady, Wedged
from wedgewatch.bench import resume_harness
from wedgewatch.config import ServerConfig, WatchdogConfig
from wedgewatch.ledger import Ledger
from wedgewatch.stack.servers import Stack
from wedgewatch.testing import eventually_async

ARMS = ("resume", "fail")
REACTION_WAIT = 120.0
"""Seconds a trial waits, once its harness is done, for the supervisor's wedge verdict and the next
ready life (with ``on_wedge = "fail"`` the proxy may have failed every request before the
supervisor's own verdict; a hang guard, far past the default heartbeat window)."""


def _after_wedge(events: list[Event]) -> int:
    """The index just past the first wedge verdict, or past the end when none came yet."""
    return next((i + 1 for i, e in enumerate(events) if isinstance(e, Wedged)), len(events) + 1)


@dataclass
class Trial:
    arm: str
    tasks: int
    lost: int = 0
    struck: int = 0  # tasks with a request on the wedged life when it was replaced
    resumed: int = 0  # request rows ``resumed``
    detection: float | None = None  # the strike -> the supervisor's wedge verdict
    restart: float | None = None  # the verdict -> the next life ready
    added: list[float] = field(default_factory=list)  # each struck task that finished
    rest: list[float] = field(default_factory=list)  # added, less the strike -> ready
    errors: list[str] = field(default_factory=list)  # what lost the tasks (a few)


def _scenario(workdir: Path, concurrency: int) -> Path:
    # The first request of the task that starts once the first `concurrency` are under way: the
    # wedged life then holds requests of those tasks too, in every shape and at every stage.
    word = resume_harness.prompt(f"t-{concurrency:02d}").split(":")[0]
    path = workdir / "wedge.toml"
    path.write_text(
        f'[[fault]]\nwhen.contains = "{word}:"\naction = "wedge"\nafter_tokens = 3\n'
        f'marker = "{workdir / "struck"}"\n'
    )
    return path


async def trial(workdir: Path, arm: str, tasks: int, concurrency: int) -> Trial:
    """One trial of ``arm`` in ``workdir`` (a fresh directory)."""
    fault_log = workdir / "faults.jsonl"
    server = ServerConfig(
        profile="sim",
        scenario=str(_scenario(workdir, concurrency)),
        log_dir=str(workdir / "logs"),
        args=["--fault-log", str(fault_log)],
    )
    events: list[Event] = []
    ledger = Ledger(workdir / "ledger.sqlite")
    try:
        stack = Stack(server, WatchdogConfig(on_wedge=arm), ledger=ledger)
        stack.bus.subscribe(events.append)
        async with stack:
            runs = await resume_harness.run(stack.url + "/v1", tasks, concurrency)
            if fault_log.exists():  # it struck: the supervisor's verdict and the next life, if late
                await eventually_async(
                    lambda: any(isinstance(e, ServerReady) for e in events[_after_wedge(events) :]),
                    timeout=REACTION_WAIT,
                    interval=0.1,
                    what="the wedge's verdict and the next ready life",
                )
        rows = [dict(r) for r in ledger.query("SELECT attempt_id, life_id, outcome FROM requests")]
    finally:
        ledger.close()
    out = Trial(arm, tasks, lost=sum(r.lost for r in runs))
    out.errors = list(dict.fromkeys(r.error for r in runs if r.lost))[:3]
    wedged = next((e for e in events if isinstance(e, Wedged)), None)
    if wedged is None:
        return out
    ready = next((e for e in events if isinstance(e, ServerReady) and e.ts > wedged.ts), None)
    gone = [r for r in rows if r["life_id"] == wedged.life_id and r["outcome"] != vocab.OK]
    struck = {
        r["attempt_id"] for r in gone if r["outcome"] == vocab.RESUMED or vocab.is_infra_outcome(r["outcome"])
    }
    out.struck = len(struck)
    out.resumed = sum(1 for r in rows if r["outcome"] == vocab.RESUMED)
    strikes = [json.loads(line) for line in fault_log.read_text().splitlines()] if fault_log.exists() else []
    strike = next((float(s["ts"]) for s in strikes if s.get("action") == vocab.WEDGE), None)
    if strike is not None:
        out.detection = round(wedged.ts - strike, 3)
    if ready is not None:
        out.restart = round(ready.ts - wedged.ts, 3)
    for run in runs:
        if run.tag not in struck or run.lost:
            continue
        peers = [r.seconds for r in runs if r.shape == run.shape and r.tag not in struck and not r.lost]
        if not peers:
            continue
        added = run.seconds - statistics.median(peers)
        out.added.append(round(added, 3))
        if strike is not None and ready is not None:
            out.rest.append(round(added - (ready.ts - strike), 3))
    return out


def _spread(values: list[float], digits: int = 1) -> dict[str, Any]:
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {
        "n": len(values),
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def summary(trials: list[Trial]) -> dict[str, Any]:
    """Per arm: tasks lost, struck and requests resumed per wedge (median and range over the
    trials); each struck task's added wall-clock and its parts (over every struck task)."""
    out: dict[str, Any] = {}
    for arm in ARMS:
        mine = [t for t in trials if t.arm == arm]
        out[arm] = {
            "trials": len(mine),
            "tasks": mine[0].tasks if mine else 0,
            "tasks_lost": _spread([float(t.lost) for t in mine], 0),
            "struck": _spread([float(t.struck) for t in mine], 0),
            vocab.RESUMED: _spread([float(t.resumed) for t in mine], 0),
            "added": _spread([a for t in mine for a in t.added]),
            "detection": _spread([t.detection for t in mine if t.detection is not None]),
            "restarting": _spread([t.restart for t in mine if t.restart is not None]),
            "rest": _spread([r for t in mine for r in t.rest]),
            "errors": list(dict.fromkeys(e for t in mine for e in t.errors))[:3],
        }
    return out


def _range(s: dict[str, Any], unit: str = "") -> str:
    if not s["n"]:
        return "-"
    return f"{s['median']:g}{unit} ({s['min']:g}-{s['max']:g}{unit})"


def table(summ: dict[str, Any]) -> list[str]:
    """The lines ``bench resume`` prints (docs/benchmarks.md quotes them)."""
    lines = [
        f"{'on_wedge':<9}{'tasks lost per wedge':<24}{'tasks struck':<16}{'requests resumed':<18}added wall-clock per struck task that finished"
    ]
    for arm in ARMS:
        s = summ[arm]
        lines.append(
            f"{arm:<9}{_range(s['tasks_lost']) + ' of ' + str(s['tasks']):<24}{_range(s['struck']):<16}"
            f"{_range(s[vocab.RESUMED]):<18}{_range(s['added'], ' s')}  n={s['added']['n']}"
        )
    r = summ["resume"]
    if r["added"]["n"]:
        lines.append(
            f"of which (medians): detection {_range(r['detection'], ' s')}, restart "
            f"{_range(r['restarting'], ' s')}, the request going on on the next life {_range(r['rest'], ' s')}"
        )
    if summ["fail"]["errors"]:
        lines.append(f"what lost a task with on_wedge = fail: {summ['fail']['errors'][0]}")
    return lines
