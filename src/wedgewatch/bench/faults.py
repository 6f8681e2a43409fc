"""``wedgewatch bench faults``: every fault of the corpus (``bench/fault_corpus.py``), N times each,
at wedgewatch's default settings; the table docs/faults.md shows: what wedgewatch did, the request
outcome, and the seconds from the fault to the client's release (median and range).

Each fault gets one supervised simulator for its trials, one after another (a wedge's trial ends
when the next life serves). The slow client's trials run at once: each waits out the 60 s
``body_timeout``.
"""

from __future__ import annotations

import asyncio
import re
import statistics
from pathlib import Path
from typing import Any

from wedgewatch.base import vocab
from wedgewatch.bench.fault_corpus import CORPUS, Fault
from wedgewatch.bench.rig.trial import FaultRig, Trial


async def run_fault(fault: Fault, workdir: Path, trials: int) -> list[Trial]:
    """``trials`` trials of ``fault`` on one rig."""
    async with FaultRig(fault, workdir) as rig:
        if fault.rig == "client":
            return list(await asyncio.gather(*(rig.trial() for _ in range(trials))))
        return [await rig.trial() for _ in range(trials)]


def summary(fault: Fault, trials: list[Trial]) -> dict[str, Any]:
    """One row of the table, and the trials behind it."""
    releases = [t.release for t in trials if t.release is not None]
    outcomes = list(dict.fromkeys(t.outcome_text() for t in trials))
    did = list(dict.fromkeys(t.did() for t in trials))  # distinct, in the order seen
    misses = sum(1 for t in trials if not met(fault, t))
    return {
        "fault": fault.name,
        "source": fault.source,
        "shows": fault.shows,
        "scenario": fault.scenario,
        "expect": fault.expect,
        "outcomes": outcomes,
        "did": did,
        "misses": misses,
        "release": {
            "n": len(releases),
            "median": round(statistics.median(releases), 3) if releases else None,
            "min": round(min(releases), 3) if releases else None,
            "max": round(max(releases), 3) if releases else None,
        },
        "trials": [vars(t) for t in trials],
    }


def met(fault: Fault, trial: Trial) -> bool:
    """The trial ended as the corpus says it must: the outcome, what a resume escaped and how
    the resumed request ended, and every reaction of the supervisor."""
    resumed_well = not fault.escaped or (trial.cause == fault.escaped and trial.legs[-1:] == [vocab.OK])
    return trial.outcome == fault.expect and resumed_well and not trial.missing


async def run(workdir: Path, trials: int, names: list[str]) -> list[dict[str, Any]]:
    """Each fault named (all when ``names`` is empty), in the corpus's order."""
    chosen = [f for f in CORPUS if not names or f.name in names]
    rows = []
    for i, fault in enumerate(chosen):
        slug = re.sub(r"[^a-z0-9]+", "-", fault.name.lower()).strip("-")
        rows.append(summary(fault, await run_fault(fault, workdir / f"{i:02d}-{slug}", trials)))
    return rows


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The Markdown table of docs/faults.md."""
    out = [
        "| fault | what the server shows | what wedgewatch did | outcome | seconds to release the client: median (range) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        rel = r["release"]
        secs = "-" if rel["median"] is None else f"{rel['median']} ({rel['min']}-{rel['max']})"
        outcome = ", ".join(r["outcomes"]) + ("" if not r["misses"] else f" ({r['misses']} missed)")
        out.append(f"| {r['fault']} | {r['shows']} | {' / '.join(r['did'])} | {outcome} | {secs} |")
    return out
