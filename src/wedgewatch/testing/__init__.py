"""A testing kit that ships with the package, as mini-swe-agent ships its DeterministicModel and
trio its MockClock: the helpers wedgewatch's own tests use, for anyone testing code around it.

- ``ManualClock``: a ``wedgewatch.base.clock.Clock`` that moves only when told (``await advance(s)``).
- ``eventually`` / ``eventually_async``: the one poll loop, with a timeout and a message.
- ``ChangingLives``, ``FixedLife``: stand-ins for the supervisor where only the life is read.
- ``ScriptedUpstream``: an aiohttp server answering by the last user message (hang, drop, cut,
  in-stream error, CRLF framing, ...), for upstream behaviours the simulator does not produce.
"""

from wedgewatch.testing.clock import ManualClock, settle
from wedgewatch.testing.fakes import ChangingLives, FixedLife
from wedgewatch.testing.upstream import ScriptedUpstream
from wedgewatch.testing.wait import eventually, eventually_async

__all__ = [
    "ChangingLives",
    "FixedLife",
    "ManualClock",
    "ScriptedUpstream",
    "eventually",
    "eventually_async",
    "settle",
]
