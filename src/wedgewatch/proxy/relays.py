"""The relay of each watched API, picked by the generation's kind (``app.GENERATIONS``)."""

from __future__ import annotations

from collections.abc import Callable

from wedgewatch.proxy.anthropic import AnthropicRelay
from wedgewatch.proxy.assemble import Kind
from wedgewatch.proxy.relay import Relay, StreamRelay
from wedgewatch.proxy.responses import ResponsesRelay
from wedgewatch.proxy.watch import Watch

RELAYS: dict[Kind, Callable[[Watch, Kind], StreamRelay]] = {
    "chat": Relay,
    "completion": Relay,
    "responses": ResponsesRelay,
    "messages": AnthropicRelay,
}


def make_relay(kind: Kind, watch: Watch) -> StreamRelay:
    """A new relay for one request of ``kind``, reporting its tokens to ``watch``."""
    return RELAYS[kind](watch, kind)
