"""Each instance's chain of attempts and how each ended, and the attempts the infrastructure
failed (``api_error``, ``harness_error``, ``interrupted``) grouped by cause; each attempt links to
its requests and the server life it ended on. ``Filters`` picks rows by status (an attempt's
status or an instance's outcome), cause, server and instance, as the page's URL says."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from wedgewatch.analysis.panels.axis import duration
from wedgewatch.base.vocab import RETRIED, sql_list
from wedgewatch.ledger.store import Ledger


@dataclass(frozen=True)
class Filters:
    status: str = ""  # an attempt status or an instance outcome
    reason: str = ""  # with status: the cause (an attempt's reason)
    server: str = ""  # a member's name
    instance: str = ""  # a part of an instance id

    @classmethod
    def of(cls, query: Mapping[str, str]) -> Filters:
        return cls(*(str(query.get(k, "")).strip()[:200] for k in ("status", "reason", "server", "instance")))

    def query(self) -> str:
        """As a URL's query string (empty fields left out)."""
        from urllib.parse import urlencode

        return urlencode({k: v for k, v in vars(self).items() if v})

    def __bool__(self) -> bool:
        return any(vars(self).values())


def instances(
    ledger: Ledger, run_id: str, filters: Filters = Filters(), only: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """The run's instances in suite order with their attempts (``only``: these instance ids)."""
    wanted = set(only) if only is not None else None
    outcomes = [
        r for r in ledger.query(
            "SELECT instance_id, position, outcome, n_attempts FROM instance_outcomes WHERE run_id = ? "
            "ORDER BY position", (run_id,),
        ) if wanted is None or r["instance_id"] in wanted
    ]  # fmt: skip
    attempts: dict[str, list[dict[str, Any]]] = {}
    rows = ledger.query(
        "SELECT a.attempt_id, a.instance_id, a.attempt_no, a.status, a.reason, a.duration, a.life_id, "
        "a.resolved AS verdict, l.member, l.profile FROM attempt_view a LEFT JOIN server_lives l ON l.life_id = a.life_id "
        "WHERE a.run_id = ? ORDER BY a.instance_id, a.attempt_no",
        (run_id,),
    )
    for a in rows:
        if wanted is not None and a["instance_id"] not in wanted:
            continue
        attempts.setdefault(str(a["instance_id"]), []).append(
            {
                "id": a["attempt_id"],
                "no": a["attempt_no"],
                "status": a["status"],
                "reason": a["reason"],
                "verdict": a["verdict"],
                "duration": duration(a["duration"]),
                "life": a["life_id"],
                "life_short": str(a["life_id"] or "-")[-8:],
                "server": a["member"] or a["profile"] or "",
                "infra": a["status"] in RETRIED,
            }
        )
    out = []
    for o in outcomes:
        chain = attempts.get(str(o["instance_id"]), [])
        if not _keep(o, chain, filters):
            continue
        out.append(
            {
                "id": o["instance_id"],
                "position": o["position"] + 1,
                "outcome": o["outcome"],
                "attempts": chain,
            }
        )
    return out


def _keep(o: Any, chain: list[dict[str, Any]], f: Filters) -> bool:
    if f.instance and f.instance not in str(o["instance_id"]):
        return False
    if f.server and not any(a["server"] == f.server for a in chain):
        return False
    if f.status:
        hits = [a for a in chain if a["status"] == f.status and (not f.reason or a["reason"] == f.reason)]
        if not hits and not (o["outcome"] == f.status and not f.reason):
            return False
    return True


def causes(ledger: Ledger, run_id: str) -> list[dict[str, Any]]:
    """The infrastructure's failures, by status and reason, most first; each with the instances it
    hit and the filter that lists them."""
    rows = ledger.query(
        "SELECT status, reason, COUNT(*) AS n, COUNT(DISTINCT instance_id) AS k FROM attempt_view "
        f"WHERE run_id = ? AND status IN ({sql_list(RETRIED)}) GROUP BY status, reason "
        "ORDER BY n DESC, status, reason",
        (run_id,),
    )
    return [
        {
            "status": r["status"],
            "reason": r["reason"],
            "attempts": int(r["n"]),
            "instances": int(r["k"]),
            "query": Filters(status=str(r["status"]), reason=str(r["reason"])).query(),
        }
        for r in rows
    ]


def servers(ledger: Ledger, run_id: str) -> list[str]:
    """The run's servers (members) by name, for the server filter."""
    rows = ledger.query(
        "SELECT DISTINCT COALESCE(member, profile) FROM server_lives WHERE run_id = ? ORDER BY 1", (run_id,)
    )
    return [str(r[0]) for r in rows]
