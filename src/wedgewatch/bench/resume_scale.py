"""``wedgewatch bench resume --scale``: ``fail`` against ``resume`` against a standby at the scale of a
lab, on the simulator: thousands of instances on a pool of simulated servers, faults at the rates
the field reports, and what each setting costs and saves: the engine time lost to faults, the
instances retried, the honest score's error.

Everything runs in server time divided by ``time_scale`` (the simulator's durations, the proxy's
deadlines, and here also the supervisor's heartbeat window, scrape interval, verdict wait and
stop grace, so detection costs what it would at scale 1). A task is the ``echo`` agent's one
request of ``TOKENS`` tokens at ``rate`` tokens a second (an agent turn of 10 s of server time),
its patch fixed and evaluation off, so an instance's outcome says only whether the infrastructure
let it finish. A member's readiness takes ``READY`` seconds of server time (a large model's load,
docs/real-servers.md), one member is slow (half the rate; slowed, never wedged), and faults
arrive as a Poisson process in engine time at the field's rates: a wedge per server every
``WEDGE_HOURS`` (vLLM issues #2731, "stuck randomly after some minutes of work, sometimes after
an hour", and #1492, #7913), a crash per server every ``CRASH_HOURS`` (Meta's Llama 3 report: 419
unexpected interruptions in 54 days on 16,384 H100s, one per about 50,700 GPU-hours, so one per
6,300 hours for an 8-GPU server; the bench's default is that rate times ``CRASH_STRESS``, so that
a run sees some). The same seed gives the same fault times in every arm.

Per arm: instances, infra_failed, retried (more than one attempt), the attempts spent; engine
hours lost: stuck (the strike to the life's end), restarting (its end to the next ready life),
redone (the server time of requests whose work was thrown away); and the score error a harness
without wedgewatch would report (every instance that met an API error scored as the model's
failure), against wedgewatch's (infra_failed apart, never in the score).
"""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import Any

from wedgewatch.base import vocab
from wedgewatch.bench.rig import armed, progress, strikes
from wedgewatch.bench.runner import make_fixture
from wedgewatch.config import Config, ServerConfig
from wedgewatch.ledger import Ledger

TOKENS = 8  # the echo agent's max_tokens
SERVER_SECONDS_PER_TASK = 10.0
READY = 120.0
"""Server seconds from a member's start to ready (a large model's load: minutes on a GPU)."""
WEDGE_HOURS = 3.0
CRASH_HOURS = 6300.0
CRASH_STRESS = 1000.0
"""The crash rate used is the field's times this: at the field's own, a run of a few engine-hours
would see none."""


def rate() -> float:
    return TOKENS / SERVER_SECONDS_PER_TASK


def config(root: Path, arm: str, n: int, members: int, scale: float, concurrency: int) -> Config:
    suite, repos = make_fixture(root, n)
    marker = root / "armed" / "wedge.marker"
    member_list = []
    for i in range(members):
        scenario = root / f"member-{i}.toml"
        speed = rate() / 2 if i == members - 1 else rate()  # the last member is slow
        scenario.write_text(
            f"[server]\ntokens_per_s = {speed}\n[startup]\nunready_seconds = {READY}\n"
            + armed.Armed(vocab.WEDGE, marker, {"action": vocab.WEDGE, "after_tokens": 2}).toml()
        )
        member: dict[str, Any] = {
            "profile": "sim",
            "scenario": str(scenario),
            "time_scale": scale,
            "log_dir": str(root / "logs"),
            "warmup": {"count": 1, "max_tokens": 1},
            "scrape_interval": 1.0 / scale,
            "heartbeat_window": 8.0 / scale,
            "stop_grace": 10.0 / scale,
            "startup_timeout": 3 * READY / scale + 60,
            "args": [
                "--max-num-seqs",
                str(max(1, concurrency // members)),
                "--fault-log",
                str(root / "faults.jsonl"),
            ],
        }
        if arm == "standby":
            member["standby"] = 1
        member_list.append(member)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()  # disarmed
    return Config.model_validate(
        {
            "servers": member_list,
            "agent": {"name": "echo", "timeout": 3600.0},
            "suite": {"path": str(suite), "repos_dir": str(repos)},
            "watchdog": {
                "on_wedge": "fail" if arm == "fail" else "resume",
                "verdict_wait": 5.0 / scale,
            },
            "run": {
                "concurrency": concurrency,
                "ledger": str(root / "ledger.sqlite"),
                "workdir": str(root / "work"),
                "evaluate": False,
                "time_scale": scale,
            },
        }
    )


def schedule(seed: int, members: int, engine_hours: float) -> list[tuple[float, str]]:
    """Fault arrivals in engine hours of the pool (``members`` servers at once): (when, kind)."""
    rng = random.Random(seed)
    out: list[tuple[float, str]] = []
    for kind, hours in ((vocab.WEDGE, WEDGE_HOURS), (vocab.CRASH, CRASH_HOURS / CRASH_STRESS)):
        t = 0.0
        while True:
            t += rng.expovariate(members / hours)
            if t > engine_hours:
                break
            out.append((t, kind))
    return sorted(out)


async def _deal(
    root: Path, plan: list[tuple[float, str]], scale: float, stop: threading.Event
) -> list[dict[str, Any]]:
    """Deal ``plan`` (in hours of server time since the pool was ready) to the running pool."""
    record = progress.Record(root / "ledger.sqlite")
    marker = root / "armed" / "wedge.marker"
    dealt: list[dict[str, Any]] = []
    rng = random.Random(len(plan))
    try:
        while not stop.is_set() and not [lv for lv in record.lives() if lv.ready_at is not None]:
            await asyncio.sleep(0.1)
        t0 = time.time()
        for when, kind in plan:
            at = t0 + when * 3600 / scale
            while time.time() < at and not stop.is_set():
                await asyncio.sleep(min(0.1, at - time.time()))
            if stop.is_set():
                break
            if kind == vocab.WEDGE:
                marker.unlink(missing_ok=True)  # the next request on any member meets it
                dealt.append({"at": time.time(), "kind": kind})
                continue
            live = [lv for lv in record.lives() if lv.ready_at and lv.ended_at is None and lv.pid]
            if live:
                victim = rng.choice(live)
                strikes.send(int(victim.pid or 0), signal.SIGKILL)
                dealt.append({"at": time.time(), "kind": kind, "life_id": victim.life_id})
    finally:
        record.close()
    return dealt


def measure(root: Path, run_id: str, scale: float, dealt: list[dict[str, Any]]) -> dict[str, Any]:
    """The arm's figures, from its ledger (hours are server hours: wall seconds times the scale)."""
    hours = scale / 3600
    strikes_log = armed.struck(root / "faults.jsonl")
    with Ledger(root / "ledger.sqlite", read_only=True) as lg:
        lives = [dict(r) for r in lg.query("SELECT * FROM server_life_view ORDER BY started_at")]
        outcomes = [dict(r) for r in lg.query("SELECT * FROM instance_outcomes WHERE run_id = ?", (run_id,))]
        failed = [
            dict(r)
            for r in lg.query(
                "SELECT q.duration, q.outcome FROM requests q JOIN attempts a USING (attempt_id)"
                f" WHERE a.run_id = ? AND q.outcome NOT IN ('{vocab.OK}', '{vocab.RESUMED}')",
                (run_id,),
            )
        ]
        attempts = int(lg.query("SELECT COUNT(*) FROM attempts WHERE run_id = ?", (run_id,))[0][0])
    stuck = restarting = 0.0
    faulty = [lv for lv in lives if lv["end_reason"] in (vocab.WEDGE, vocab.CRASH)]
    for lv in faulty:
        hit = [float(s["ts"]) for s in strikes_log if int(s["pid"]) == lv["pid"]]
        kill = [d["at"] for d in dealt if d.get("life_id") == lv["life_id"]]
        strike = min(hit + kill, default=lv["ended_at"])
        stuck += max(0.0, lv["ended_at"] - strike)
        same = [m for m in lives if m["member"] == lv["member"] and m["started_at"] >= lv["ended_at"] - 1e-3]
        # Down until the next life was ready, or until the run ended without it.
        ready = min((m["ready_at"] or m["ended_at"] or lv["ended_at"] for m in same), default=lv["ended_at"])
        restarting += max(0.0, ready - lv["ended_at"])
    first_failed = sum(1 for o in outcomes if int(o["n_infra"]) + int(o["n_interrupted"]) > 0)
    n = len(outcomes)
    infra = sum(1 for o in outcomes if o["outcome"] == vocab.INFRA_FAILED)
    return {
        "instances": n,
        "faults": {
            "wedges": sum(1 for lv in faulty if lv["end_reason"] == vocab.WEDGE),
            "crashes": sum(1 for lv in faulty if lv["end_reason"] == vocab.CRASH),
        },
        "attempts": attempts,
        "retried": sum(1 for o in outcomes if int(o["n_attempts"]) > 1),
        vocab.INFRA_FAILED: infra,
        "engine_hours_lost": {
            "stuck": round(stuck * hours, 3),
            "restarting": round(restarting * hours, 3),
            "redone": round(sum(float(r["duration"]) for r in failed) * hours, 3),
        },
        "score_error_naive": round(first_failed / n, 4) if n else None,
        "score_error_wedgewatch": 0.0,
        "coverage": round((n - infra) / n, 4) if n else None,
    }


def run_arm(
    root: Path, arm: str, n: int, members: int, scale: float, concurrency: int, seed: int
) -> dict[str, Any]:
    """One arm in ``root``: the run, with the seed's faults dealt from a thread of the rig."""
    from wedgewatch.runner import entry as runner_main

    if arm == "standby" and "standby" not in ServerConfig.model_fields:
        return {"arm": arm, "not_built": "this wedgewatch has no [server] standby"}
    cfg = config(root, arm, n, members, scale, concurrency)
    engine_hours = n * SERVER_SECONDS_PER_TASK / 3600 * 1.5  # a run's length, with room for its faults
    plan = schedule(seed, members, engine_hours / members)
    stop = threading.Event()
    dealt: list[dict[str, Any]] = []

    def rig() -> None:
        dealt.extend(asyncio.run(_deal(root, plan, scale, stop)))

    thread = threading.Thread(target=rig, daemon=True)
    thread.start()
    rid = f"scale-{arm}-{secrets.token_hex(3)}"
    t0 = time.monotonic()
    try:
        runner_main.start(cfg, run_id=rid)
    finally:
        stop.set()
        thread.join(30)
    wall = time.monotonic() - t0
    return {
        "arm": arm,
        "wall": round(wall, 1),
        "server_hours": round(wall * scale / 3600, 2),
        "dealt": len(dealt),
        **measure(root, rid, scale, dealt),
    }


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The arms side by side (docs/benchmarks.md quotes it)."""
    lines = [
        "| arm | instances | wedges, crashes | attempts | retried | infra_failed | engine-hours lost: stuck / "
        "restarting / redone | a naive harness's score error | wedgewatch's |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "not_built" in r:
            lines.append(f"| {r['arm']} | not built: {r['not_built']} |||||||")
            continue
        h = r["engine_hours_lost"]
        lines.append(
            f"| {r['arm']} | {r['instances']} | {r['faults']['wedges']}, {r['faults']['crashes']} | {r['attempts']} "
            f"| {r['retried']} | {r[vocab.INFRA_FAILED]} | {h['stuck']:.2f} / {h['restarting']:.2f} / {h['redone']:.2f} "
            f"| {100 * (r['score_error_naive'] or 0):.1f} points | {100 * r['score_error_wedgewatch']:.1f} points "
            f"({100 * (r['coverage'] or 0):.1f}% of instances scored) |"
        )
    return lines


def main(argv: list[str]) -> None:
    """``python -m wedgewatch.bench.resume_scale ROOT ARM N MEMBERS SCALE CONCURRENCY SEED``: one
    arm in a process of its own (``bench resume --scale`` runs each arm so)."""
    root, arm = Path(argv[0]), argv[1]
    n, members, scale, concurrency, seed = (
        int(argv[2]),
        int(argv[3]),
        float(argv[4]),
        int(argv[5]),
        int(argv[6]),
    )
    print(json.dumps(run_arm(root, arm, n, members, scale, concurrency, seed)))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
