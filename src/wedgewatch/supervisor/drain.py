"""Draining a server life before a planned recycle: hand out no new attempt, let the ones in
flight finish (up to ``recycle_drain_timeout``), then let the restart go ahead. With a spare life
(standby.py) the spare serves at once instead, and the replaced life is retired: ended once the
requests the proxy holds on it are done (``retire``).

Killing in-flight attempts at a recycle would turn a planned, healthy restart into lost work;
waiting forever would let one slow attempt hold the whole run. A wedge, a crash or a stop during
the drain ends it at once: their own paths take the life down.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from wedgewatch.base.clock import Clock
from wedgewatch.base.events import Drained, DrainStarted, EventBus
from wedgewatch.base.protocols import ProxyView
from wedgewatch.config import ServerConfig
from wedgewatch.supervisor.life import Life

POLL = 0.05  # seconds between two looks at the work in flight


class Draining(Protocol):
    """What a drain reads of the supervisor."""

    cfg: ServerConfig
    bus: EventBus
    busy: Callable[[], int]
    clock: Clock

    @property
    def stopping(self) -> bool: ...

    @property
    def current(self) -> Life | None: ...


async def drain(life: Life, reason: str, sup: Draining) -> None:
    """Return once nothing is in flight, the deadline passed, or the life is no longer the one to
    recycle. ``DrainStarted`` and ``Drained`` events tell what was waited for and what was left."""
    limit = sup.cfg.recycle_drain_timeout
    if limit <= 0 or sup.busy() <= 0:
        return
    life.draining = True
    t0 = sup.clock()
    member = sup.cfg.name
    sup.bus.publish(
        DrainStarted(member=member, life_id=life.life_id, reason=reason, in_flight=sup.busy(), timeout=limit)
    )
    while (
        sup.busy() > 0
        and sup.clock() - t0 < limit
        and life is sup.current
        and not (life.ended or life.wedged or life.crashed or sup.stopping)
    ):
        await sup.clock.sleep(POLL)
    waited = round(sup.clock() - t0, 3)
    sup.bus.publish(
        Drained(member=member, life_id=life.life_id, reason=reason, left=sup.busy(), waited=waited)
    )


async def retire(life: Life, reason: str, sup: Draining, view: ProxyView) -> None:
    """A life a spare replaced in a handover (supervisor.py): return once it is idle (the proxy
    holds no request on it and its last scrape shows nothing running or waiting), the deadline
    passed, or it wedged, crashed or ended. Its attempts are not waited for: each goes on on the
    promoted life with its next request. ``view``: what the proxy holds on each life."""
    limit = sup.cfg.recycle_drain_timeout
    t0 = sup.clock()
    member = sup.cfg.name
    seen = life.reading.wall if life.reading is not None else None

    def held() -> int:
        return view(life.life_id)[0]

    def idle() -> bool:
        r = life.reading
        fresh = r is not None and r.wall != seen  # scraped after the promotion
        return held() == 0 and fresh and not (r.running or 0) and not (r.waiting or 0)  # type: ignore[union-attr]

    if idle() or limit <= 0:
        return
    sup.bus.publish(
        DrainStarted(member=member, life_id=life.life_id, reason=reason, in_flight=held(), timeout=limit)
    )
    while (
        not idle()
        and sup.clock() - t0 < limit
        and not (life.ended or life.wedged or life.crashed or sup.stopping)
    ):
        await sup.clock.sleep(POLL)
    waited = round(sup.clock() - t0, 3)
    sup.bus.publish(Drained(member=member, life_id=life.life_id, reason=reason, left=held(), waited=waited))
