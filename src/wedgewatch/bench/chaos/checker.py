"""The invariants a run struck by faults must keep, checked on its ledger and on the agent's own
trajectories against the control (the same run, never struck):

- ``one_outcome``: every instance ends with exactly one final outcome (one model-side attempt,
  nothing pending);
- ``outcomes_equal``: each instance's outcome is the control's;
- ``replies_equal``: every reply the agent acted on is the control's reply to the same request
  (``replies.py``); a reply that differs is reported with its first differing token and the
  top-2 log-probability margin there when the engine can say (``margins.py``), and accepted only
  below the margin measured on the control;
- ``ledger_check``: ``wedgewatch ledger check`` clean;
- ``rows_lost``: every request, life, attempt and runner that started has its end;
- ``nothing_left``: no server process, sandbox directory, sandbox process or loop mount left;
- ``bounded``: a request a fault struck and the proxy carried on finished at most detection +
  restart + a bound later than the control's same request (the bound measured on the control);
- ``memory_flat``: the runner's memory (the proxy lives in it) and open files did not grow across
  the faults.

A broken invariant names the fault that preceded it and the command that replays the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wedgewatch.base import vocab
from wedgewatch.base.processes import Identity
from wedgewatch.bench.chaos.process import Sample
from wedgewatch.bench.chaos.replies import Comparison, compare
from wedgewatch.bench.chaos.table import Dealt
from wedgewatch.bench.chaos.timing import Run, added_times, control_bound, start_seconds, struck, timed
from wedgewatch.ledger import Ledger, checks

INVARIANTS = (
    "one_outcome",
    "outcomes_equal",
    "replies_equal",
    "ledger_check",
    "rows_lost",
    "nothing_left",
    "bounded",
    "memory_flat",
)

FD_SLACK = 8
"""Open files the runner may hold more after the faults than before (a log, a connection pool's
sockets at another moment of their life); a leak per fault grows past it within a schedule."""
RSS_SLACK_MIB = 64.0
"""Resident memory the runner may hold more after the faults than before: the agents' threads,
their HTTP clients and the imports a first evaluation brings in (measured on the control: see
docs/reliability.md)."""


@dataclass
class Broken:
    invariant: str
    what: str
    at: float | None = None
    fault: str = ""


def outcomes(ledger: Ledger, run_id: str) -> dict[str, str]:
    rows = ledger.query("SELECT instance_id, outcome FROM instance_outcomes WHERE run_id = ?", (run_id,))
    return {str(r["instance_id"]): str(r["outcome"]) for r in rows}


def one_outcome(ledger: Ledger, run_id: str) -> list[Broken]:
    out = []
    for r in ledger.query("SELECT * FROM instance_outcomes WHERE run_id = ?", (run_id,)):
        model_side = ledger.query(
            "SELECT COUNT(*) FROM attempts a JOIN attempt_ends e USING (attempt_id)"
            f" WHERE a.run_id = ? AND a.instance_id = ? AND e.status IN ('{vocab.SUBMITTED}', '{vocab.EARLY_STOP}')",
            (run_id, r["instance_id"]),
        )[0][0]
        if r["outcome"] == vocab.PENDING or int(model_side) != 1:
            out.append(
                Broken(
                    "one_outcome",
                    f"{r['instance_id']}: outcome {r['outcome']}, {model_side} model-side attempts",
                )
            )
    return out


def outcomes_equal(mine: dict[str, str], control: dict[str, str]) -> list[Broken]:
    out = []
    for inst in sorted(set(mine) | set(control)):
        if mine.get(inst) != control.get(inst):
            out.append(
                Broken(
                    "outcomes_equal", f"{inst}: {mine.get(inst)} where the control has {control.get(inst)}"
                )
            )
    return out


def replies_equal(cmp: Comparison, accepted: set[str]) -> list[Broken]:
    """Each differing reply not in ``accepted`` (request keys whose difference the margins
    accepted), and each request the control never sent."""
    out = []
    for e, c in cmp.differing:
        if e.request in accepted:
            continue
        at = next(
            (i for i, (x, y) in enumerate(zip(e.text, c.text, strict=False)) if x != y),
            min(len(e.text), len(c.text)),
        )
        out.append(
            Broken(
                "replies_equal",
                f"{e.attempt_id} step {e.step}: the reply differs from the control's at character {at}: "
                f"{e.text[max(0, at - 20) : at + 40]!r} / {c.text[max(0, at - 20) : at + 40]!r}",
                e.started,
            )
        )
    for e, where in cmp.unmatched:
        out.append(
            Broken(
                "replies_equal",
                f"{e.attempt_id} step {e.step}: a request the control never sent: {where}",
                e.started,
            )
        )
    return out


def _end_of_second(ts: float | None) -> float | None:
    """A trajectory's time is cut to the second: what struck before it may lie within that second."""
    return None if ts is None else ts + 1.0


def ledger_check(ledger: Ledger) -> list[Broken]:
    return [Broken("ledger_check", line) for line in checks.problems(ledger)]


def rows_lost(ledger: Ledger) -> list[Broken]:
    queries = {
        "a request that started has no end": "SELECT request_id FROM request_starts WHERE request_id NOT IN (SELECT request_id FROM requests)",
        "a server life has no end": "SELECT life_id FROM server_lives WHERE life_id NOT IN (SELECT life_id FROM server_life_ends)",
        "an attempt has no end": "SELECT attempt_id FROM attempts WHERE attempt_id NOT IN (SELECT attempt_id FROM attempt_ends)",
    }
    out = []
    for what, sql in queries.items():
        for r in ledger.query(sql):
            out.append(Broken("rows_lost", f"{what}: {r[0]}"))
    return out


def nothing_left(ledger: Ledger, workdir: Path) -> list[Broken]:
    from wedgewatch.bench.rig.strikes import in_sandbox

    out = []
    for r in ledger.query(
        "SELECT life_id, pid, pid_space, pid_start FROM server_lives WHERE pid IS NOT NULL"
    ):
        if Identity(int(r["pid"]), str(r["pid_space"]), r["pid_start"]).alive():
            out.append(Broken("nothing_left", f"server of life {r['life_id']} (pid {r['pid']}) still runs"))
    for sandbox in workdir.glob("*/*/sandbox"):  # the runner leaves each one empty
        if any(sandbox.iterdir()):
            out.append(Broken("nothing_left", f"sandbox left: {sandbox}"))
    for pgid in in_sandbox(workdir) if workdir.exists() else []:
        out.append(Broken("nothing_left", f"a sandbox's process group {pgid} still runs"))
    mounts = Path("/proc/mounts").read_text().splitlines()
    where = str(workdir.resolve())
    out += [
        Broken("nothing_left", f"mount left: {m.split()[1]}")
        for m in mounts
        if m.split()[1].startswith(where)
    ]
    return out


def memory_flat(samples: list[Sample]) -> list[Broken]:
    """Within each runner process: the last sample against the first."""
    out = []
    by_pid: dict[int, list[Sample]] = {}
    for s in samples:
        by_pid.setdefault(s.pid, []).append(s)
    for pid, mine in by_pid.items():
        if len(mine) < 2:
            continue
        first, last = mine[0], mine[-1]
        if last.fds - first.fds > FD_SLACK:
            out.append(
                Broken(
                    "memory_flat",
                    f"runner {pid}: open files {first.fds} -> {last.fds} ({first.label} -> {last.label})",
                    last.ts,
                )
            )
        if last.rss_mib - first.rss_mib > RSS_SLACK_MIB:
            out.append(
                Broken(
                    "memory_flat",
                    f"runner {pid}: RSS {first.rss_mib:.0f} -> {last.rss_mib:.0f} MiB ({first.label} -> {last.label})",
                    last.ts,
                )
            )
    return out


def bounded(added: list[dict[str, Any]], bound: float) -> list[Broken]:
    out = []
    for a in added:
        if a["detection"] is None or a["restarting"] is None:
            continue
        limit = a["detection"] + a["restarting"] + a["redone"] + a["prefill"] + bound
        if a["added"] > limit:
            out.append(
                Broken(
                    "bounded",
                    f"fault #{a['fault']} {a['kind']}: request {a['request_id']} added {a['added']:.1f} s, more than "
                    f"detection {a['detection']:.1f} + restart {a['restarting']:.1f} + redone {a['redone']:.1f} + "
                    f"prefill {a['prefill']:.1f} + {bound:.1f} s",
                )
            )
    return out


def settled(dealt: list[Dealt], limit: float) -> list[Broken]:
    """Every fault dealt left the run serving again (a live runner, a ready life) within
    ``limit`` seconds: detection, a restart of the whole run, and the bound."""
    out = []
    for d in dealt:
        if d.at is None:
            continue
        if d.settled is None or d.settled > limit:
            took = "never, within the rig's wait" if d.settled is None else f"after {d.settled:.1f} s"
            out.append(
                Broken(
                    "bounded",
                    f"fault #{d.planned.n} {d.planned.kind}: the run served again {took} (limit {limit:.1f} s)",
                    d.at,
                )
            )
    return out


def fault_before(t: float | None, dealt: list[Dealt]) -> Dealt | None:
    if t is None:
        return None
    before = [d for d in dealt if d.at is not None and d.at <= t]
    return before[-1] if before else None


def describe(d: Dealt | None) -> str:
    if d is None:
        return "before any fault"
    return f"after fault #{d.planned.n} {d.planned.kind} (at {d.tokens:.0f} tokens: {'; '.join(d.did)})"


def check_run(
    run: Run, control: Run, control_b: Run, accepted: set[str], detection: float
) -> tuple[list[Broken], dict[str, Any]]:
    """Every invariant of ``run`` against ``control`` (``control_b``: the second control, for the
    time bound; ``detection``: the longest the run's settings take to find a dead or wedged
    life); the broken ones, and the figures."""
    with Ledger(run.ledger, read_only=True) as lg, Ledger(control.ledger, read_only=True) as cl:
        with Ledger(control_b.ledger, read_only=True) as cb:
            control_times = timed(cl, control)
            noise = control_bound(control_times, timed(cb, control_b))
            start = max(start_seconds(cl, control.run_id), start_seconds(cb, control_b.run_id))
        limit = detection + 2 * start + noise["bound"]
        mine, theirs = outcomes(lg, run.run_id), outcomes(cl, control.run_id)
        cmp = compare(run.exchanges, control.exchanges)
        added = added_times(lg, run, control_times)
        broken = (
            one_outcome(lg, run.run_id)
            + outcomes_equal(mine, theirs)
            + replies_equal(cmp, accepted)
            + ledger_check(lg)
            + rows_lost(lg)
            + nothing_left(lg, run.workdir)
            + bounded(added, noise["bound"])
            + settled(run.dealt, limit)
            + memory_flat(run.samples)
        )
        figures = {
            "instances": len(mine),
            "outcomes_equal": sum(1 for k, v in mine.items() if theirs.get(k) == v),
            "replies": {
                "equal": cmp.equal,
                "differing": len(cmp.differing),
                "unmatched": len(cmp.unmatched),
                "accepted": sum(1 for e, _ in cmp.differing if e.request in accepted),
            },
            "control_noise": noise,
            "settle_limit": {
                "detection": detection,
                "control_start": round(start, 2),
                "limit": round(limit, 2),
            },
            "added": added,
            "struck": struck(lg, run),
        }
    for b in broken:
        b.fault = describe(fault_before(b.at, run.dealt))
    return broken, figures
