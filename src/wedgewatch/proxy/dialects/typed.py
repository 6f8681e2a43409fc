"""What the relays of typed-event streams share: the Responses API (``responses.py``) and
Anthropic's Messages API (``anthropic.py``) frame every event as ``event: <type>`` plus its
``data:`` line and end with an event of their own, not ``[DONE]``.

Each event is passed on as it came, its ``event:`` line kept (Anthropic's SDK skips an event
without one). A subclass says what an event means (``_see``) and how the proxy's own error is
framed once a stream has begun (``error_frame``).
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from typing import Any, Protocol

from wedgewatch.base.vocab import REPLY_NOT_API, REPLY_NOT_JSON
from wedgewatch.proxy.deadlines import Watch
from wedgewatch.proxy.dialects.chat import comment_frame
from wedgewatch.proxy.dialects.chat_bytes import is_object, snippet
from wedgewatch.proxy.dialects.kind import Kind
from wedgewatch.wire.sse import DONE, SSEEvent

_TYPE = re.compile(rb'"type"\s*:\s*"([A-Za-z_.]+)"')


def event_type(ev: SSEEvent, prefix: bytes = b"") -> str | None:
    """The event's type: its ``event:`` line, else the first ``type`` in its data that starts
    with ``prefix`` (the top-level type comes first in every server's events we know)."""
    if ev.event:
        return ev.event
    if not ev.data:
        return None
    for m in _TYPE.finditer(ev.data):
        if m.group(1).startswith(prefix):
            return m.group(1).decode()
    return None


def has_text(value: Any) -> bool:
    """A non-empty string, or a dict or list that holds one."""
    if isinstance(value, str):
        return value != ""
    if isinstance(value, dict):
        return any(has_text(v) for v in value.values())
    if isinstance(value, list):
        return any(has_text(v) for v in value)
    return False


class EventRewriter(Protocol):
    """Rewrites a replayed leg's events before they are forwarded (``proxy/replay.Replay``: a
    begun stream resumed on the next life); None swallows an event. ``departed`` says why the
    replay is not the reply the client has: the request then fails as ``cause`` (the failure it
    was resumed from: outcome, message)."""

    departed: str | None
    cause: tuple[str, str]

    def rewrite(self, ev: SSEEvent) -> SSEEvent | None: ...


class Translator(Protocol):
    """Makes the events the relay reads out of another API's stream (``resume/reencode.py``: a
    continuation generated from token ids, re-encoded as the client's events); ``fault`` says
    what in that stream was not well-formed."""

    fault: tuple[str, str] | None

    def convert(self, events: list[SSEEvent], last: bool) -> list[SSEEvent]: ...


class TypedRelay(ABC):
    """``relay.StreamRelay`` over a stream of typed events."""

    __slots__ = (
        "done",
        "error",
        "events",
        "fault",
        "finish",
        "sent",
        "source",
        "splice",
        "usage",
        "want_usage",
        "watch",
        "withheld",
    )

    END = "its last event"

    def __init__(self, watch: Watch, kind: Kind) -> None:  # kind: the relays' one signature
        self.watch = watch
        self.want_usage = False  # usage always comes, in the stream's own events
        self.done = False  # the stream's end came: what follows cannot fail the request
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.fault: tuple[str, str] | None = None  # the first malformed event: (outcome, message)
        self.events = 0  # well-formed events of the API seen
        # With resume on: the data of each event forwarded to a streaming client, undecoded (a
        # resume replays the request and reads them back, proxy/resume/replay.py); and a replayed leg's
        # splice into the stream.
        self.sent: list[bytes] | None = None
        self.splice: EventRewriter | None = None
        self.withheld: list[bytes] = []  # relay.StreamRelay's: the error and what follows it
        self.source: Translator | None = None  # what makes the events read out of another stream

    @property
    def answered(self) -> bool:
        """Whether any event of the API's answer came (a stream of nothing but ``[DONE]`` is no
        answer)."""
        return self.events > 0

    def _judge(self, ev: SSEEvent) -> bool:
        """Whether ``ev`` (which has data) is well-formed: one JSON object with a ``type`` (every
        event of both APIs carries one), or chat's ``[DONE]``, which some gateways add. The first
        that is not becomes ``fault``."""
        data = ev.data or b""
        if data == DONE:
            return True
        if is_object(data) and b'"type"' in data:
            self.events += 1
            return True
        if not is_object(data):
            outcome, why = REPLY_NOT_JSON, "sent a data line that is not JSON"
        else:
            outcome, why = REPLY_NOT_API, f"sent an event without a type ({ev.event or 'unnamed'})"
        if self.fault is None:
            self.fault = (outcome, f"the upstream's stream {why}: {snippet(data)}")
        return False

    @abstractmethod
    def _see(self, ev: SSEEvent, now: float) -> None:
        """Read one event: progress, the end, the usage, an error."""

    def frames(self, events: list[SSEEvent], now: float, begun: bool, last: bool) -> list[bytes]:
        frames: list[bytes] = []
        if self.source is not None:
            events = self.source.convert(events, last)
            self.fault = self.fault or self.source.fault
        for ev in events:
            if ev.data is None:
                if begun and ev.comments:
                    frames.append(comment_frame(ev.comments))
                continue
            if self.error is not None and self.sent is not None:
                self.withheld.append(frame(ev))  # after the server's error (``withheld``)
                continue
            if not self._judge(ev):
                break
            self._see(ev, now)
            if self.error is not None and self.sent is not None:
                self.withheld.append(frame(ev))  # held until the proxy knows whose failure it is
                continue
            if self.splice is not None:
                spliced = self.splice.rewrite(ev)
                if self.splice.departed is not None:
                    self.fault = self.splice.cause
                    break
                if spliced is None:
                    continue  # the client has it from the leg before
                ev = spliced
            if self.sent is not None:
                self.sent.append(ev.data or b"")
            frames.append(frame(ev))
        return frames

    def release(self) -> list[bytes]:
        return []  # nothing is kept back

    @abstractmethod
    def error_frame(self, obj: dict[str, Any]) -> bytes:
        """The proxy's error ``obj`` as the stream's last event, once the stream has begun."""


def error_event(payload: dict[str, Any]) -> bytes:
    """An ``event: error`` frame carrying ``payload``."""
    return b"event: error\ndata: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def frame(ev: SSEEvent) -> bytes:
    head = b"event: " + ev.event.encode() + b"\n" if ev.event else b""
    data = ev.data or b""
    return head + b"".join(b"data: " + line + b"\n" for line in data.split(b"\n")) + b"\n"
