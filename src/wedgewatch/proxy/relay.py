"""What an upstream stream has said so far, event by event, and the frames to pass on.

A ``Relay`` keeps the facts the ending of a request needs (``[DONE]`` seen, finish reason, usage,
an in-stream error) and tells the request's ``Watch`` about every token. For a streaming client it
returns each event's ``data`` bytes unchanged in a fresh frame; for a non-streaming one it decodes
each chunk and feeds the ``Assembler``.
"""

from __future__ import annotations

import json
from typing import Any

from wedgewatch.proxy.assemble import Assembler
from wedgewatch.proxy.progress import finish_reason, has_usage, is_error, is_progress, progress_of
from wedgewatch.proxy.watch import Watch
from wedgewatch.sse import DONE, SSEEvent


def decode(data: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


class Relay:
    __slots__ = ("asm", "done", "error", "finish", "usage", "want_usage", "watch")

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.want_usage = False  # the streaming client asked for the usage chunk itself
        self.asm: Assembler | None = None  # set for a non-streaming client
        self.done = False  # the upstream said [DONE]: what follows cannot fail the request
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None  # an error object the upstream sent in its stream

    def frames(self, events: list[SSEEvent], now: float, begun: bool) -> list[bytes]:
        """A streaming client's events: classify each and return the frames to forward (SSE
        comments only once the client's stream has ``begun``)."""
        frames: list[bytes] = []
        for ev in events:
            data = ev.data
            if data is None:
                if begun and ev.comments:
                    frames.append(b"".join(b": " + c + b"\n" for c in ev.comments) + b"\n")
                continue
            if data == DONE:
                self.done = True
            elif is_progress(data):
                self.watch.progress(now)
            elif is_error(data):
                self.error = decode(data) or {"error": {}}
            elif has_usage(data):
                obj = decode(data)
                if obj is not None:
                    self.usage = obj.get("usage")
                    if not self.want_usage and not obj.get("choices"):
                        continue  # the client did not ask for the usage-only chunk
            fr = finish_reason(data)
            if fr is not None:
                self.finish = fr
            if b"\n" in data:  # an event sent as several data: lines goes on as several
                frames.append(b"".join(b"data: " + line + b"\n" for line in data.split(b"\n")) + b"\n")
            else:
                frames.append(b"data: " + data + b"\n\n")
        return frames

    def assemble(self, events: list[SSEEvent], now: float) -> None:
        """A non-streaming client's events: decode each and feed the assembler."""
        asm = self.asm
        assert asm is not None
        for ev in events:
            data = ev.data
            if data is None:
                continue
            if data == DONE:
                self.done = True
                continue
            obj = decode(data)
            if obj is None:
                continue
            if "error" in obj:
                self.error = obj
                continue
            if progress_of(obj):
                self.watch.progress(now)
            asm.feed(obj)
            if obj.get("usage") is not None:
                self.usage = obj["usage"]
            for choice in obj.get("choices") or ():
                if isinstance(choice, dict) and choice.get("finish_reason") is not None:
                    self.finish = choice["finish_reason"]
