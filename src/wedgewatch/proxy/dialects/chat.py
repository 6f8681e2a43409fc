"""What an upstream stream has said so far, event by event, and the frames to pass on.

A ``Relay`` keeps the facts the ending of a request needs (``[DONE]`` seen, finish reason, usage,
an in-stream error), tells the request's ``Watch`` about every token and returns each event's
``data`` bytes unchanged in a fresh frame. Only a streaming client's request is streamed: a
non-streaming one goes upstream as the client sent it and its answer comes back whole
(``answers.Answers._whole``).

A streaming client that did not ask for usage does not get the usage-only chunk the proxy asked
for. llama.cpp moves its ``timings`` from the finish chunk onto that chunk when usage is asked
for, so the finish chunk is kept back until the next event: fields the usage-only chunk has
beyond the standard ones go back onto it, where the server puts them for such a client.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from wedgewatch.base.vocab import REPLY_NOT_API, REPLY_NOT_JSON
from wedgewatch.proxy.deadlines import Watch
from wedgewatch.proxy.dialects.chat_bytes import (
    finish_reason,
    has_usage,
    hide_ids,
    is_error,
    is_object,
    is_progress,
    snippet,
)
from wedgewatch.proxy.dialects.kind import Kind
from wedgewatch.wire.sse import DONE, SSEEvent, encode_data

# The fields of a chunk every OpenAI-compatible server sends; the rest are the server's own.
_STANDARD = frozenset(
    {"id", "object", "created", "model", "system_fingerprint", "service_tier", "choices", "usage"}
)


def decode(data: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


class Rewriter(Protocol):
    """Rewrites a chunk's data before it is read and forwarded (``resume.Splice``: a continued
    leg's chunks made part of the client's stream; ``chat_replay.ChatReplay``: a replayed one's);
    None drops the chunk. ``departed`` says why a replay is not the reply the client has: the
    request then fails as ``cause`` (the failure it was resumed from: outcome, message)."""

    departed: str | None
    cause: tuple[str, str]

    def rewrite(self, data: bytes) -> bytes | None: ...


class StreamRelay(Protocol):
    """One request's reading of its upstream stream: chat and completions (``Relay``), the
    Responses API (``responses.ResponsesRelay``) or the Messages API (``messages.AnthropicRelay``).

    Every reply is judged: ``fault`` is set (outcome, message) at the first event that is not a
    well-formed part of the API's answer, and ``answered`` says whether any part of an answer came.
    The exchange ends the request as the server's failure on either."""

    END: str  # what ends a whole stream, for the message of a cut one
    want_usage: bool
    done: bool
    finish: str | None
    usage: dict[str, Any] | None
    error: dict[str, Any] | None
    fault: tuple[str, str] | None
    # With resume on, the server's error event and all after it, held back from the client until
    # the proxy knows whose failure it was (proxy/resume/blame.py): passed on as they came when it
    # was the request's own, dropped when the request goes on, on the next life.
    withheld: list[bytes]

    @property
    def answered(self) -> bool: ...

    def frames(self, events: list[SSEEvent], now: float, begun: bool, last: bool) -> list[bytes]: ...
    def release(self) -> list[bytes]: ...
    def error_frame(self, obj: dict[str, Any]) -> bytes: ...


class Relay:
    __slots__ = (
        "chunks",
        "done",
        "error",
        "fault",
        "finish",
        "hide_ids",
        "kept",
        "kind",
        "sent",
        "splice",
        "usage",
        "want_usage",
        "watch",
        "withheld",
    )

    END = "[DONE]"

    def __init__(self, watch: Watch, kind: Kind = "chat") -> None:
        self.watch = watch
        self.kind = kind
        self.want_usage = False  # the streaming client asked for the usage chunk itself
        self.done = False  # the upstream said [DONE]: what follows cannot fail the request
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None  # an error object the upstream sent in its stream
        self.kept: bytes | None = None  # a finish chunk's data, kept back for the usage chunk's extras
        self.fault: tuple[str, str] | None = None  # the first malformed event: (outcome, message)
        self.chunks = 0  # chunks with choices: parts of an answer
        # With resume on: the data of each chunk forwarded to a streaming client, undecoded (a
        # resume reads them back, proxy/resume/); and a continued leg's splice into the stream.
        self.sent: list[bytes] | None = None
        self.splice: Rewriter | None = None
        self.withheld: list[bytes] = []
        # The proxy asked for token ids the client did not (proxy/resume/token_ids.py): they are kept in
        # ``sent`` and replaced by null on their way to the client.
        self.hide_ids = False

    @property
    def answered(self) -> bool:
        return self.chunks > 0

    def _malformed(self, outcome: str, data: bytes, why: str) -> None:
        if self.fault is None:
            self.fault = (outcome, f"the upstream's stream {why}: {snippet(data)}")

    def frames(self, events: list[SSEEvent], now: float, begun: bool, last: bool) -> list[bytes]:
        """A streaming client's events: classify each and return the frames to forward (SSE
        comments only once the client's stream has ``begun``; a kept finish chunk on the
        ``last`` events of the stream)."""
        frames: list[bytes] = []
        for ev in events:
            data = ev.data
            if data is None:
                if begun and ev.comments:
                    frames.append(comment_frame(ev.comments))
                continue
            if self.error is not None and self.sent is not None:
                self.withheld.append(_frame(data))  # after the server's error (``withheld``)
                continue
            if self.splice is not None and data != DONE:
                spliced = self.splice.rewrite(data)
                if self.splice.departed is not None:
                    self.fault = self.splice.cause
                    break
                if spliced is None:
                    # A second role chunk (the client has its first), or a replay's tokens the
                    # client has: the server is at work all the same.
                    if is_progress(data):
                        self.watch.progress(now)
                    continue
                data = spliced
            if data == DONE:
                self.done = True
            elif not is_object(data):
                self._malformed(REPLY_NOT_JSON, data, "sent a data line that is not JSON")
                break
            elif is_progress(data):
                self.watch.progress(now)
                self.chunks += 1
            elif is_error(data):
                self.error = decode(data) or {"error": {}}
            elif b'"choices"' not in data and not has_usage(data):
                self._malformed(REPLY_NOT_API, data, "sent a chunk without choices")
                break
            else:
                self.chunks += 1
                if has_usage(data):
                    obj = decode(data)
                    if obj is not None:
                        self.usage = obj.get("usage")
                        if not self.want_usage and not obj.get("choices"):
                            self._extras(obj)
                            continue  # the client did not ask for the usage-only chunk
            frames += self.release()
            if self.error is not None and self.sent is not None:
                self.withheld.append(_frame(data))  # the error and what follows: ``withheld``
                continue
            raw = data
            if self.hide_ids:
                data = hide_ids(data)
            fr = finish_reason(data)
            if fr is not None:
                self.finish = fr
                if not self.want_usage:
                    self.kept = data
                    continue
            if self.sent is not None and data != DONE:
                self.sent.append(raw)
            frames.append(_frame(data))
        if last:
            frames += self.release()
        return frames

    def release(self) -> list[bytes]:
        """The kept finish chunk's frame, once (nothing if none is kept)."""
        data, self.kept = self.kept, None
        return [] if data is None else [_frame(data)]

    def _extras(self, usage_chunk: dict[str, Any]) -> None:
        extras = {k: v for k, v in usage_chunk.items() if k not in _STANDARD}
        kept = decode(self.kept) if self.kept is not None and extras else None
        if kept is not None:
            extras = {k: v for k, v in extras.items() if k not in kept}
            if extras:
                self.kept = json.dumps({**kept, **extras}, separators=(",", ":"), ensure_ascii=False).encode()

    def error_frame(self, obj: dict[str, Any]) -> bytes:
        """The proxy's own error once the stream has begun: a last ``data:`` line (the SDK raises)."""
        return encode_data(obj)


def comment_frame(comments: list[bytes]) -> bytes:
    """SSE comments (``: ping``) as one frame, passed on once the client's stream has begun."""
    return b"".join(b": " + c + b"\n" for c in comments) + b"\n"


def _frame(data: bytes) -> bytes:
    if b"\n" in data:  # an event sent as several data: lines goes on as several
        return b"".join(b"data: " + line + b"\n" for line in data.split(b"\n")) + b"\n"
    return b"data: " + data + b"\n\n"
