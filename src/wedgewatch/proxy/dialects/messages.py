"""What an Anthropic Messages API stream (``POST /v1/messages``) has said so far, and the frames
to pass on (vLLM and llama.cpp's server serve this API; Claude Code speaks nothing else).

- **Progress** is a ``content_block_delta`` that carries generated text (``text_delta``,
  ``thinking_delta``, an ``input_json_delta`` piece of a tool call's input), and the
  ``content_block_start`` of a ``tool_use`` block (it carries the call's name). ``message_start``,
  ``ping``, the other block starts and stops, a ``signature_delta`` and ``message_delta`` are not.
- **The end** is ``message_stop``. The usage comes in two halves: the input in
  ``message_start``'s message, the output in ``message_delta`` (with the stop reason). A stream
  that closes before ``message_stop`` was cut.
- **An error** is an ``error`` event, ``{"type": "error", "error": {"type", "message"}}``; its
  type says whose fault it is (``invalid_request_error`` 400 ... ``overloaded_error`` 529).
"""

from __future__ import annotations

from typing import Any

from wedgewatch.proxy.deadlines import Watch
from wedgewatch.proxy.dialects.chat import decode
from wedgewatch.proxy.dialects.kind import Kind
from wedgewatch.proxy.dialects.typed import TypedRelay, error_event, event_type, has_text
from wedgewatch.wire.sse import DONE, SSEEvent

_TEXT_KEYS = (b'"text":"', b'"thinking":"', b'"partial_json":"')
_DELTA_FIELD = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}
# The HTTP status Anthropic answers each error type with (https://docs.anthropic.com/en/api/errors).
_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


def is_progress(kind: str | None, data: bytes) -> bool:
    """Does this event carry generated tokens? Decodes JSON only when the bytes cannot tell."""
    if kind == "content_block_delta":
        for key in _TEXT_KEYS:
            i = data.find(key)
            if i >= 0 and data[i + len(key) : i + len(key) + 1] != b'"':
                return True
        if b'": ' not in data:
            return False
        delta = (decode(data) or {}).get("delta")  # pretty-printed JSON: ask the decoded event
        return isinstance(delta, dict) and has_text({k: delta.get(k) for k in _DELTA_FIELD.values()})
    if kind == "content_block_start":
        return b'"tool_use"' in data
    return False


class AnthropicRelay(TypedRelay):
    """``relay.StreamRelay`` over a Messages API stream."""

    __slots__ = ("message",)

    END = "message_stop"

    def __init__(self, watch: Watch, kind: Kind = "messages") -> None:
        super().__init__(watch, kind)
        self.message: dict[str, Any] = {}  # message_start's message, then message_delta's fields

    def _see(self, ev: SSEEvent, now: float) -> None:
        data = ev.data
        assert data is not None
        kind = event_type(ev)
        if data == DONE:
            self.done = True
        elif is_progress(kind, data):
            self.watch.progress(now)
        elif kind in ("message_start", "message_delta", "error"):
            self._decoded(kind, decode(data) or {})
        elif kind == "message_stop":
            self.done = True

    def _decoded(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "error":
            err = obj.get("error")
            err = dict(err) if isinstance(err, dict) else {"message": str(err)}
            err.setdefault("status", _STATUS.get(str(err.get("type")), 500))
            self.error = {"error": err}
            return
        if kind == "message_start":
            msg = obj.get("message")
            self.message = dict(msg) if isinstance(msg, dict) else {}
        else:
            delta = obj.get("delta")
            if isinstance(delta, dict):
                self.message.update(delta)
                self.finish = str(delta.get("stop_reason") or "") or None
            if isinstance(obj.get("usage"), dict):
                self.message["usage"] = {**(self.message.get("usage") or {}), **obj["usage"]}
        usage = self.message.get("usage")
        self.usage = usage if isinstance(usage, dict) else None

    def error_frame(self, obj: dict[str, Any]) -> bytes:
        """An ``error`` event in Anthropic's shape, its ``error`` the proxy's error object: the
        SDK raises on it at once."""
        return error_event({"type": "error", "error": obj.get("error") or {}})
