"""What the proxy settles about a generation request before its ``Exchange`` begins: its tag, how
long it waited for a ready server life (and why none came, if none did), and its content
fingerprints. All of it goes into the request's row (``detail_json``), never the text itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wedgewatch.base.protocols import Replaceable, Upstream
from wedgewatch.wire import fingerprint


@dataclass(slots=True)
class Arrival:
    attempt_id: str | None = None  # the tag: /a/<tag>/..., or the tag header
    waited: float = 0.0  # seconds spent waiting for a ready server life
    unavailable: str | None = None  # why no life came within restart_wait, if none did
    fingerprints: dict[str, list[str]] | None = None

    def hash_body(self, body: Mapping[str, Any]) -> None:
        self.fingerprints = fingerprint.of_request(body)

    def detail(self) -> dict[str, Any]:
        """What the row's detail_json gets from the arrival."""
        out: dict[str, Any] = {}
        if self.waited >= 0.001:
            out["waited_for_life"] = round(self.waited, 3)
        if self.fingerprints is not None:
            out["fp"] = self.fingerprints
        return out


async def wait_for_life(upstream: Upstream, wait: float) -> tuple[float, str | None]:
    """Before a request is sent: when the upstream is between lives, wait up to ``wait`` seconds
    for the next ready one. Returns (seconds waited, None), or (seconds waited, why) when no life
    came: the request then fails as a ``connection`` error without reaching a dead address.

    Without this, a request that arrives during a restart goes to the old life's address, which
    refuses it within milliseconds, and the harness scores a model failure for a restart.
    """
    if not isinstance(upstream, Replaceable) or upstream.life() is not None:
        return 0.0, None
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(wait):
            await upstream.wait_ready()
    except TimeoutError:
        return time.monotonic() - t0, f"no ready server life within restart_wait ({wait:g} s)"
    except Exception as exc:  # the supervisor gave up, or is stopping
        return time.monotonic() - t0, f"no server life: {exc}"
    return time.monotonic() - t0, None
