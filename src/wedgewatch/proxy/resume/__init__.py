"""What happens to a request when the server life under it ends: held, and sent on to the next
ready life (``[watchdog] on_wedge = "resume"``; docs/proxy.md, "Resume").

One seam to the exchange: ``Legs``, the base ``exchange.Exchange`` extends. An infrastructure
failure (``answers._fail``) asks it whether the request goes on (``Legs._resumable``); if so it
raises ``Resume``, the exchange's loop of legs catches it and ``Legs._turn`` ends the leg (its
row: ``resumed``) and sets up the next on the next ready life. ``ask`` has the token ids asked
for as a reply is relayed, for an exact continuation; ``KeepAlive`` writes comments to a held
stream, and the exchange stops it before it writes.

One module per way a request goes on:

- ``legs.py``: the decision and the turn; a request the client has received nothing of is sent
  again whole (no module of its own: the payload as it came);
- ``continuation.py``: a begun chat or completion stream continued from what was relayed (its
  text, or its token ids), and the continuation's chunks spliced into the client's stream;
- ``token_ids.py``: the continuation from vLLM's token ids (a completion given the ids);
- ``replay.py``: a begun Responses or Messages stream sent again whole, its events held to what
  the client has and swallowed while they repeat it;
- ``chat_replay.py``: the same for a chat or completion stream that text cannot continue.

And what decides and what waits: ``blame.py`` (whose failure an error was: the engine's death,
held and resumed, or the request's own, passed on at once) and ``keepalive.py`` (comments to a
begun stream while it is held).
"""

from wedgewatch.proxy.resume.keepalive import KeepAlive
from wedgewatch.proxy.resume.legs import Legs, Resume
from wedgewatch.proxy.resume.token_ids import ask

__all__ = ["KeepAlive", "Legs", "Resume", "ask"]
