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

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wedgewatch.base import vocab
from wedgewatch.base.processes import Identity
from wedgewatch.bench.chaos.deal import Dealt
from wedgewatch.bench.chaos.process import Sample
from wedgewatch.bench.chaos.replies import Comparison, Exchange, compare
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


@dataclass
class Run:
    """A finished run, as the checker reads it."""

    run_id: str
    ledger: Path
    workdir: Path
    exchanges: list[Exchange]
    samples: list[Sample] = field(default_factory=list)
    dealt: list[Dealt] = field(default_factory=list)


def outcomes(ledger: Ledger, run_id: str) -> dict[str, str]:
    rows = ledger.query("SELECT instance_id, outcome FROM instance_outcomes WHERE run_id = ?", (run_id,))
    return {str(r["instance_id"]): str(r["outcome"]) for r in rows}


def requests(ledger: Ledger, run_id: str) -> list[dict[str, Any]]:
    """The run's request rows, each with its ``detail`` read."""
    rows = ledger.query(
        "SELECT q.* FROM requests q JOIN attempts a ON a.attempt_id = q.attempt_id WHERE a.run_id = ?"
        " ORDER BY q.started_at",
        (run_id,),
    )
    return [{**dict(r), "detail": json.loads(r["detail_json"] or "{}")} for r in rows]


def timed(ledger: Ledger, run: Run) -> dict[str, list[dict[str, Any]]]:
    """Each request key of the run's exchanges -> its chain of legs in the ledger: an attempt's
    n-th request (its first leg) is its trajectory's step n."""
    by_attempt: dict[str, list[list[dict[str, Any]]]] = {}
    for chain in legs(requests(ledger, run.run_id)):
        by_attempt.setdefault(str(chain[0]["attempt_id"]), []).append(chain)
    out: dict[str, list[dict[str, Any]]] = {}
    for e in run.exchanges:
        chains = by_attempt.get(e.attempt_id, [])
        if e.step <= len(chains):
            out.setdefault(e.request, chains[e.step - 1])
    return out


def seconds(chain: list[dict[str, Any]]) -> float:
    """A request's wall-clock from its first leg's start to its last leg's end."""
    return float(chain[-1]["started_at"] + chain[-1]["duration"] - chain[0]["started_at"])


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


def legs(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each request's chain of legs (a resumed row, then the legs that went on), first leg first."""
    by_id = {r["request_id"]: r for r in rows}
    later = {str(r["detail"].get("resumed_as")) for r in rows if r["detail"].get("resumed_as")}
    chains = []
    for r in rows:
        if r["request_id"] in later:
            continue
        chain = [r]
        while chain[-1]["detail"].get("resumed_as") in by_id and len(chain) < 10:
            chain.append(by_id[chain[-1]["detail"]["resumed_as"]])
        chains.append(chain)
    return chains


def added_times(ledger: Ledger, run: Run, control: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """For each fault, each request in flight on a life it struck that the proxy carried on to
    the end (a chain of legs ending ``ok``): its added seconds against the control's same
    request, and what the proxy's resume is allowed to cost: the fault's detection (the strike
    to the life's end), the restart (the life's end to the next ready life), the work redone (a
    request whose client reads no stream has received nothing, so it is sent again whole: the
    seconds it had run when struck) and one prefill of it (its first token in the control)."""
    mine = timed(ledger, run)
    key_of = {id(chain[0]): key for key, chain in mine.items()}
    lives = sorted(
        (dict(r) for r in ledger.query("SELECT * FROM server_life_view ORDER BY started_at")),
        key=lambda lv: lv["started_at"],
    )
    by_id = {lv["life_id"]: lv for lv in lives}
    out = []
    for d in run.dealt:
        if d.at is None:
            continue
        for life_id in dict.fromkeys(d.lives):
            life = by_id.get(life_id)
            if life is None:
                continue
            end = life.get("ended_at")
            ready = next(
                (lv["ready_at"] for lv in lives if lv["started_at"] >= (end or d.at) and lv["ready_at"]), None
            )
            for chain in mine.values():
                first, last = chain[0], chain[-1]
                if (
                    first["life_id"] != life_id
                    or not first["started_at"] <= d.at <= first["started_at"] + first["duration"]
                ):
                    continue
                key = key_of.get(id(first))
                if len(chain) < 2 or last["outcome"] != vocab.OK or key not in control:
                    continue
                out.append(
                    {
                        "fault": d.planned.n,
                        "kind": d.planned.kind,
                        "request_id": first["request_id"],
                        "legs": len(chain),
                        "added": round(seconds(chain) - seconds(control[key]), 3),
                        "detection": None if end is None else round(end - d.at, 3),
                        "restart": None if end is None or ready is None else round(ready - end, 3),
                        "redone": 0.0 if first["client_stream"] else round(d.at - first["started_at"], 3),
                        "prefill": round(float(control[key][0]["ttft"] or 0.0), 3),
                    }
                )
    return out


def bounded(added: list[dict[str, Any]], bound: float) -> list[Broken]:
    out = []
    for a in added:
        if a["detection"] is None or a["restart"] is None:
            continue
        limit = a["detection"] + a["restart"] + a["redone"] + a["prefill"] + bound
        if a["added"] > limit:
            out.append(
                Broken(
                    "bounded",
                    f"fault #{a['fault']} {a['kind']}: request {a['request_id']} added {a['added']:.1f} s, more than "
                    f"detection {a['detection']:.1f} + restart {a['restart']:.1f} + redone {a['redone']:.1f} + "
                    f"prefill {a['prefill']:.1f} + {bound:.1f} s",
                )
            )
    return out


def start_seconds(ledger: Ledger, run_id: str) -> float:
    """The longest a runner of the run took from its start to a ready life (the control's:
    what a restart of the run costs when nothing is wrong)."""
    starts = [float(r[0]) for r in ledger.query("SELECT ts FROM run_marks WHERE run_id = ?", (run_id,))]
    ready = [
        float(r[0]) for r in ledger.query("SELECT ready_at FROM server_life_view WHERE ready_at IS NOT NULL")
    ]
    spans = [min((t for t in ready if t >= s), default=s) - s for s in starts]
    return max(spans, default=0.0)


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


def control_bound(a: dict[str, list[dict[str, Any]]], b: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """How much the same request's wall-clock differs between the two control runs (median and
    max seconds); the bound on a struck request's time beyond detection and restart is twice
    that max, and at least one second."""
    diffs = [abs(seconds(a[k]) - seconds(b[k])) for k in a if k in b]
    if not diffs:
        return {"n": 0, "median": 0.0, "max": 0.0, "bound": 1.0}
    mx = max(diffs)
    return {
        "n": len(diffs),
        "median": round(statistics.median(diffs), 3),
        "max": round(mx, 3),
        "bound": round(max(1.0, 2 * mx), 3),
    }


def fault_before(t: float | None, dealt: list[Dealt]) -> Dealt | None:
    if t is None:
        return None
    before = [d for d in dealt if d.at is not None and d.at <= t]
    return before[-1] if before else None


def describe(d: Dealt | None) -> str:
    if d is None:
        return "before any fault"
    return f"after fault #{d.planned.n} {d.planned.kind} (at {d.tokens:.0f} tokens: {'; '.join(d.did)})"


def struck(ledger: Ledger, run: Run) -> dict[int, dict[str, int]]:
    """Per fault dealt: the requests it struck in flight (a request on a life it struck, running
    when it struck, that did not end ``ok``) and the attempts it ended (running then, ended
    other than on the model's side)."""
    rows = requests(ledger, run.run_id)
    attempts = [
        dict(r)
        for r in ledger.query(
            "SELECT a.started_at, e.ended_at, e.status FROM attempts a JOIN attempt_ends e USING (attempt_id)"
            " WHERE a.run_id = ?",
            (run.run_id,),
        )
    ]
    out = {}
    for d in run.dealt:
        if d.at is None:
            continue
        at = d.at
        hit = [
            r
            for r in rows
            if r["life_id"] in d.lives
            and r["outcome"] != vocab.OK
            and r["started_at"] <= at <= r["started_at"] + r["duration"]
        ]
        ended = [
            a
            for a in attempts
            if a["started_at"] <= at <= a["ended_at"] and a["status"] not in vocab.MODEL_SIDE
        ]
        out[d.planned.n] = {"requests": len(hit), "attempts": len(ended)}
    return out


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
