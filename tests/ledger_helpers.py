"""Writing ledger rows by hand for the runner's and ledger's unit tests (real SQLite)."""

from __future__ import annotations

import time
from typing import Any

from wedgewatch.config import Config
from wedgewatch.ledger import Ledger


def make_run(
    ledger: Ledger, run_id: str, instance_ids: list[str], attempts_max: int = 3, cfg: Config | None = None
) -> None:
    cfg = cfg or Config()
    ledger.append(
        "runs",
        {
            "run_id": run_id,
            "started_at": time.time(),
            "config_json": cfg.snapshot(),
            "config_hash": cfg.hash(),
            "tool_version": "test",
            "suite": "test",
            "attempts_max": attempts_max,
            "seed": 0,
        },
    )
    ledger.append_many(
        "run_instances",
        [
            {"run_id": run_id, "instance_id": iid, "position": n, "instance_json": {"instance_id": iid}}
            for n, iid in enumerate(instance_ids)
        ],
    )


def add_attempt(
    ledger: Ledger,
    run_id: str,
    instance_id: str,
    no: int,
    status: str | None,
    reason: str = "",
    patch: str | None = None,
    resolved: int | str | None = "none",
    duration: float = 1.0,
    life_id: str = "life-1",
) -> str:
    """One attempt (and its end unless status is None; an evaluation unless resolved is 'none')."""
    attempt_id = f"{run_id}-{instance_id}-{no}"
    t0 = time.time()
    ledger.append(
        "attempts",
        {
            "attempt_id": attempt_id,
            "run_id": run_id,
            "instance_id": instance_id,
            "attempt_no": no,
            "started_at": t0,
            "life_id": life_id,
            "agent": "test",
            "age_seconds": 1.5,
            "age_requests": 3,
            "age_tokens": 100,
        },
    )
    if status is not None:
        ledger.append(
            "attempt_ends",
            {
                "attempt_id": attempt_id,
                "ended_at": t0 + duration,
                "status": status,
                "reason": reason,
                "patch": patch,
                "life_id": life_id,
            },
        )
    if resolved != "none":
        evaluate(ledger, attempt_id, resolved)  # type: ignore[arg-type]
    return attempt_id


def evaluate(ledger: Ledger, attempt_id: str, resolved: int | None, source: str = "local") -> None:
    ledger.append(
        "evaluations", {"attempt_id": attempt_id, "ts": time.time(), "resolved": resolved, "source": source}
    )


def outcomes(ledger: Ledger, run_id: str) -> dict[str, str]:
    rows = ledger.query("SELECT instance_id, outcome FROM instance_outcomes WHERE run_id = ?", (run_id,))
    return {r[0]: r[1] for r in rows}


def next_actions(ledger: Ledger, run_id: str) -> dict[str, tuple[Any, Any]]:
    rows = ledger.query(
        "SELECT instance_id, next_action, next_attempt_no FROM instance_next WHERE run_id = ?", (run_id,)
    )
    return {r[0]: (r[1], r[2]) for r in rows}


def dump(ledger: Ledger) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, for comparing a ledger before and after something."""
    tables = [
        r[0]
        for r in ledger.query(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    return {t: [tuple(r) for r in ledger.query(f"SELECT * FROM {t} ORDER BY rowid")] for t in sorted(tables)}


def add_life(
    ledger: Ledger,
    run_id: str,
    life_id: str,
    end: str | None,
    age: int,
    ready: bool = True,
    start_reason: str = "run_start",
) -> None:
    """One server life (ready unless told, ended with ``end`` at ``age`` requests unless None)."""
    t = time.time()
    ledger.append(
        "server_lives",
        {"life_id": life_id, "run_id": run_id, "profile": "sim", "base_url": "http://127.0.0.1:1",
         "start_reason": start_reason, "started_at": t},
    )  # fmt: skip
    if ready:
        ledger.append("server_life_ready", {"life_id": life_id, "ready_at": t + 1, "ready_seconds": 1.0})
    if end is not None:
        ledger.append(
            "server_life_ends",
            {"life_id": life_id, "ended_at": t + 5, "end_reason": end, "age_seconds": 5.0,
             "age_requests": age, "age_tokens": age * 100},
        )  # fmt: skip
