"""The relay of each watched API, picked by the generation's kind (``app.GENERATIONS``)."""

from __future__ import annotations

from collections.abc import Callable

from wedgewatch.proxy.deadlines import Watch
from wedgewatch.proxy.dialects.chat import Relay, StreamRelay
from wedgewatch.proxy.dialects.kind import Kind
from wedgewatch.proxy.dialects.messages import AnthropicRelay
from wedgewatch.proxy.dialects.responses import ResponsesRelay

RELAYS: dict[Kind, Callable[[Watch, Kind], StreamRelay]] = {
    "chat": Relay,
    "completion": Relay,
    "responses": ResponsesRelay,
    "messages": AnthropicRelay,
}


def make_relay(kind: Kind, watch: Watch) -> StreamRelay:
    """A new relay for one request of ``kind``, reporting its tokens to ``watch``."""
    return RELAYS[kind](watch, kind)
