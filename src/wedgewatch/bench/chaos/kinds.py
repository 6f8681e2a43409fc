"""The faults ``bench chaos`` deals, and the seeded schedule that places them on token progress.

Each kind says where it strikes (the engine, wedgewatch, or two faults close together), whether it
waits for a request in flight (a request running on the engine with tokens of its own) before it
strikes, and which engines it can be dealt to. A schedule is a list of faults, each due once the
run has generated ``gap_tokens`` tokens (over every server life) since the fault before it was
dealt and the run served again, or once it has generated the schedule's gaps up to and with its
own, whichever comes first; it is a pure function of the seed, the number of faults, the kinds
and the control run's token total, so a seed replays. The gaps add up to ``SPAN`` of the control
run's tokens, and a fault is never due later than its mark: so every fault is due while the
struck run still has a good part of its tokens ahead, whatever the seed drew and however many
tokens a fault's own wait took (a full disk held for seconds while the run goes on). The struck
run generates at least the control's tokens (its replies are the control's; a fault only makes
it generate some again), less what the rig did not see of a life before it died (a scrape's
worth).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

ENGINE, WEDGEWATCH, PAIR = "engine", "wedgewatch", "two close together"


@dataclass(frozen=True)
class Kind:
    name: str
    side: str
    in_flight: bool
    """Dealt only while a request runs on the engine with tokens of its own."""
    what: str
    engines: frozenset[str] = frozenset({"sim", "vllm-cpu", "llamacpp"})


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("freeze", ENGINE, True, "the engine frozen (SIGSTOP of vLLM's EngineCore; the simulator "
             "wedges a few tokens into a request)"),
        Kind("slow", ENGINE, True, "the engine slowed, not wedged: SIGSTOP and SIGCONT in bursts of "
             "half a second, ten times"),
        Kind("kill_engine", ENGINE, True, "the engine killed (SIGKILL of vLLM's EngineCore; the "
             "simulator's engine dies with an error event); the server exits"),
        Kind("kill_server", ENGINE, True, "the server killed (SIGKILL of the API server)"),
        Kind("exit_zero", ENGINE, True, "the server exits with status 0 (SIGTERM of vLLM's and llama.cpp's "
             "API server; the simulator's engine dies and it exits 0)"),
        Kind("engine_error", ENGINE, True, "the engine's error event: vLLM's execute-model timeout (its "
             "Worker stopped past VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS), the simulator's error event",
             frozenset({"sim", "vllm-cpu"})),
        Kind("conn_reset", ENGINE, True, "every connection between the proxy and the engine reset by the "
             "kernel (ss -K)"),
        Kind("kill_runner", WEDGEWATCH, False, "`wedgewatch run` SIGKILLed (its process group), then "
             "`run --resume`"),
        Kind("kill_sandbox", WEDGEWATCH, False, "a sandbox's running command SIGKILLed (its process "
             "group)"),
        Kind("disk_full", WEDGEWATCH, False, "the ledger's file system full, for real (a small loop-mounted "
             "ext4 filled to its last block), for a few seconds"),
        Kind("file_size", WEDGEWATCH, False, "RLIMIT_FSIZE of `wedgewatch run` set to its ledger's size "
             "(SQLite: disk I/O error), for a few seconds"),
        Kind("kill_then_freeze", PAIR, True, "the server killed, then the next life frozen as soon as "
             "it has a request in flight (a wedge during the restart after a crash)"),
        Kind("freeze_then_kill_runner", PAIR, True, "the engine frozen, then `wedgewatch run` SIGKILLed "
             "once the wedge's verdict is in (a kill during a resume), then `run --resume`"),
    )
}  # fmt: skip


LETHAL = frozenset(
    {"freeze", "kill_engine", "kill_server", "exit_zero", "engine_error", "kill_then_freeze",
     "freeze_then_kill_runner", "kill_runner"}
)  # fmt: skip
"""Kinds after which the run serves again only from another life (or another runner)."""


def kinds_for(engine: str) -> list[str]:
    return [k.name for k in KINDS.values() if engine in k.engines]


@dataclass(frozen=True)
class Planned:
    """One fault of a schedule."""

    n: int
    kind: str
    gap_tokens: int
    """Due once the run has generated this many tokens (over every server life) since the fault
    before it was dealt and the run served again, or the schedule's gaps so far, if sooner."""
    after_tokens: int
    """For a fault dealt in flight: tokens the struck request has first (the simulator's
    ``after_tokens``; for a signal, tokens the engine generated since the request began)."""
    hold: float
    """Seconds a disk stays full or a file size limited."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


SPAN = 0.6
"""The share of the control run's tokens a schedule's gaps add up to: its last fault is due with
two fifths of the run still ahead (requests in flight to strike), however few its faults are."""


def plan(seed: int, faults: int, kinds: list[str], total_tokens: float) -> list[Planned]:
    """``faults`` faults of ``kinds``: every kind at least once when there are as many faults as
    kinds, the rest drawn at random, in a seeded order; gaps drawn uniformly from half to one and a
    half times an even share, then scaled to add up to ``SPAN`` of the control run's
    ``total_tokens`` (drawn alone, a few gaps could add up to more than the run). At least half
    are dealt in flight: faults of other kinds are drawn again from those that are until that
    holds."""
    rng = random.Random(seed)
    order = list(kinds)
    rng.shuffle(order)
    picked = [order[i % len(order)] if i < len(order) else rng.choice(order) for i in range(faults)]
    flying = [k for k in kinds if KINDS[k].in_flight]
    i = 0
    while flying and sum(KINDS[k].in_flight for k in picked) * 2 < faults and i < faults:
        if not KINDS[picked[-1 - i]].in_flight:
            picked[-1 - i] = rng.choice(flying)
        i += 1
    rng.shuffle(picked)
    # Drawn in the order they always were, so a seed deals the kinds it dealt before.
    draws = [(rng.uniform(0.5, 1.5), rng.randint(2, 12), round(rng.uniform(2.0, 6.0), 1)) for _ in picked]
    scale = SPAN * total_tokens / sum(w for w, _, _ in draws)
    return [
        Planned(n + 1, kind, int(w * scale), after, hold)
        for n, (kind, (w, after, hold)) in enumerate(zip(picked, draws, strict=True))
    ]
