"""The one Server-Sent Events parser.

Incremental and byte-oriented, so the proxy can look at each ``data:`` line only as much as it
must and forward the original bytes unchanged. Lines may end in ``\\n``, ``\\r\\n`` or ``\\r``;
an event ends at a blank line (https://html.spec.whatwg.org/multipage/server-sent-events.html).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from wedgewatch.base.errors import FrameTooLarge

DONE = b"[DONE]"


@dataclass(slots=True)
class SSEEvent:
    """One event: its ``data`` lines joined by ``\\n`` (None if it had none) and its comments."""

    data: bytes | None = None
    comments: list[bytes] = field(default_factory=list)
    event: str | None = None

    @property
    def is_done(self) -> bool:
        return self.data == DONE

    def json(self) -> Any:
        """The data decoded as JSON (raises ``ValueError`` if it is not)."""
        if self.data is None:
            raise ValueError("event has no data")
        return json.loads(self.data)


MAX_FRAME = 16 * 1024**2
"""Bytes of one line, and of one event's data, the parser holds before it gives up (the proxy's
``max_frame_bytes`` default): far past any real chunk, far below what would hurt."""


class SSEParser:
    """Feed bytes as they arrive; get complete events back. A line or an event's data longer than
    ``max_frame`` raises ``FrameTooLarge`` and drops what was held, so a stream that never sends a
    newline costs at most ``max_frame`` bytes."""

    __slots__ = ("_after_cr", "_buf", "_current", "_max")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = b""
        self._current = SSEEvent()
        self._after_cr = False
        self._max = max_frame

    def _too_large(self, what: str, size: int) -> FrameTooLarge:
        self._buf = b""
        self._current = SSEEvent()
        return FrameTooLarge(f"an SSE {what} of more than {self._max} bytes ({size} held)")

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]  # the \n of a \r\n split across two reads
        self._after_cr = False
        if b"\r" in chunk:
            # Rare in practice (vLLM, SGLang and llama.cpp all send \n); normalise once.
            self._after_cr = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + chunk if self._buf else chunk
        events: list[SSEEvent] = []
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            self._line(buf[start:nl], events)
            start = nl + 1
        self._buf = buf[start:]
        if len(self._buf) > self._max:
            raise self._too_large("line", len(self._buf))
        return events

    def close(self) -> list[SSEEvent]:
        """Flush a last event that was not followed by a blank line."""
        events: list[SSEEvent] = []
        if self._buf:
            self._line(self._buf, events)
            self._buf = b""
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        cur = self._current
        if not line:
            if cur.data is not None or cur.comments or cur.event is not None:
                events.append(cur)
                self._current = SSEEvent()
            return
        if line[0] == 58:  # b":" -- a comment such as llama.cpp's ": ping"
            cur.comments.append(line[1:].strip())
            return
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            cur.data = value if cur.data is None else cur.data + b"\n" + value
            if len(cur.data) > self._max:
                raise self._too_large("event", len(cur.data))
        elif name == b"event":
            cur.event = value.decode("utf-8", "replace")
        # id: and retry: mean nothing to an LLM stream; ignored as the spec allows.


def iter_events(body: bytes) -> Iterator[SSEEvent]:
    """Parse a whole SSE body at once (tests, files)."""
    parser = SSEParser()
    yield from parser.feed(body)
    yield from parser.close()


def encode_data(obj: Any) -> bytes:
    """One ``data:`` event, as servers write it."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
