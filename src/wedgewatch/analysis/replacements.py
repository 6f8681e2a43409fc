"""Which server lives replaced another (the restarts), why, and what their starts cost.

A life started for anything but an execution's start (``FIRST_LIFE``) replaced one: a wedge, a
crash, API errors, a recycle, a failed start. A spare life (start reason ``standby``) replaced one
only once promoted, for the promotion's reason (its ``promoted`` event), and its start cost the run
nothing: it was ready before it was needed, so its ready time is not counted as restart time.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from wedgewatch.base.vocab import FIRST_LIFE, PROMOTED, SPARE
from wedgewatch.ledger.store import Ledger


def promoted(ledger: Ledger, run_id: str) -> dict[str, str]:
    """Spare life id -> the reason it was promoted, for the lives of ``run_id``."""
    rows = ledger.query(
        "SELECT e.life_id, e.detail_json FROM events e JOIN server_lives l ON l.life_id = e.life_id "
        "WHERE e.kind = ? AND l.run_id = ?",
        (PROMOTED, run_id),
    )
    out: dict[str, str] = {}
    for r in rows:
        raw = r["detail_json"]
        detail = json.loads(raw) if isinstance(raw, str) else dict(raw or {})
        out[str(r["life_id"])] = str(detail.get("reason"))
    return out


def restarts(lives: Sequence[Any], spares: dict[str, str]) -> list[Any]:
    """The lives that replaced another (``spares``: ``promoted``'s answer)."""
    return [lv for lv in lives if lv["life_id"] in spares or lv["start_reason"] not in (*FIRST_LIFE, SPARE)]


def reasons(replacing: Sequence[Any], spares: dict[str, str]) -> dict[str, int]:
    """Why each restart happened: a promoted spare's promotion reason, else its start reason."""
    return dict(Counter(spares.get(lv["life_id"], lv["start_reason"]) for lv in replacing))


def seconds(replacing: Sequence[Any], spares: dict[str, str]) -> float:
    """Seconds of start and warm-up the restarts cost (a promoted spare's cost none)."""
    return sum(float(lv["ready_seconds"] or 0.0) for lv in replacing if lv["life_id"] not in spares)
