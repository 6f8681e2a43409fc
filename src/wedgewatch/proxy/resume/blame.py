"""Whose failure it is: the server life's (its engine died: the request is held for the next life)
or the request's own (the error goes to its client as the server sent it, at once).

A request that fails with an error event, a 5xx or a cut connection may have met an engine that
died, or its own fault (a context overflow, a tool parser's error) on a server that goes on
serving others. vLLM says which at once: once its engine is dead ``/health`` answers 503 (its
``check_health`` raises ``EngineDeadError``), and the API server exits within about 5 s; while the
engine lives it answers 200. A server that is going away refuses the connection. So the proxy asks
``/health`` of the server the request failed on:

- 200: the life serves. The error is the request's own (``OWN_ERROR``); it is not held, and
  nothing waits for a verdict that will not come.
- 503, a refused or reset connection: the engine is dead or the server is going
  (``ENGINE_DEATH``). The supervisor is told (``LifeInDoubt``: its canary decides now, not at its
  next scrape) and the request waits up to ``verdict_wait`` for the verdict, then goes on, on the
  next life.
- anything else (no ``/health``, no answer in time): unknown; the request waits for the verdict
  as before.

The row of the request says which it was and why (``blame``, ``blame_why``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp

from wedgewatch.base.vocab import ENGINE_DEATH, OWN_ERROR

HEALTH = "/health"
ASK_WITHIN = 2.0
"""Seconds the proxy gives ``/health`` to answer: vLLM's answers from its API server's loop in
milliseconds, dead engine or not; a server that does not answer in this long is unknown."""


@dataclass(frozen=True)
class Blame:
    """What ``/health`` said of a request's failure: ``who`` (``ENGINE_DEATH``, ``OWN_ERROR``, or
    None when it cannot say), ``health`` (its answer, for the record) and ``why``."""

    who: str | None
    health: str
    why: str

    def detail(self) -> dict[str, str]:
        """The request row's words for it (none when it could not say)."""
        return {} if self.who is None else {"blame": self.who, "blame_why": self.why}


async def judge(session: aiohttp.ClientSession, base_url: str, within: float = ASK_WITHIN) -> Blame:
    """Ask the server at ``base_url`` whether its engine lives."""
    url = base_url.rstrip("/") + HEALTH
    try:
        async with asyncio.timeout(within), session.get(url) as resp:
            status = resp.status
    except TimeoutError:
        return Blame(None, "timeout", f"{HEALTH} did not answer within {within:g} s")
    except (aiohttp.ClientConnectionError, OSError) as exc:
        why = f"the server is going: {HEALTH} failed ({type(exc).__name__})"
        return Blame(ENGINE_DEATH, "refused", why)
    except aiohttp.ClientError as exc:
        return Blame(None, "error", f"{HEALTH} failed: {type(exc).__name__}")
    if status == 200:
        return Blame(OWN_ERROR, "200", f"{HEALTH} answered 200: the server goes on serving")
    if status == 503:
        return Blame(ENGINE_DEATH, "503", f"{HEALTH} answered 503: the engine is dead")
    return Blame(None, str(status), f"{HEALTH} answered {status}")
