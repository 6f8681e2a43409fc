"""What a Responses API stream (``POST /v1/responses``) has said so far, and the frames to pass on.

The same questions as ``relay.Relay`` asks of a chat stream, for the other shape vLLM and SGLang
serve: typed events, each framed as ``event: <type>`` plus one ``data:`` line, and no ``[DONE]``.

- **Progress** is an event that carries generated text: any ``*.delta`` event with a non-empty
  ``delta`` (output text, reasoning text, a function call's arguments, a refusal; an object
  delta when it holds text), and the
  ``response.output_item.added`` that opens a function call (it carries the call's name, the
  call's first token). ``response.created``, ``in_progress``, the other item and part events and
  the ``*.done`` events repeat what was sent or carry nothing new: not progress. As in a chat
  stream, ``"delta":"`` can only match a real key: inside a JSON string every ``"`` is escaped.
- **The end** is ``response.completed``, or ``response.incomplete`` (the token limit, a content
  filter): it carries the whole response and its usage. A stream that closes before it was cut
  (a ``[DONE]``, which some servers and gateways add, also ends it).
- **An error** is an ``error`` event, a ``response.failed`` event (its ``response.error``), or a
  chat-style ``{"error": ...}`` object; it is kept in the chat shape so the proxy's endings read
  it unchanged.
"""

from __future__ import annotations

from typing import Any

from wedgewatch.proxy.deadlines import Watch
from wedgewatch.proxy.dialects.chat import decode
from wedgewatch.proxy.dialects.chat_bytes import is_error
from wedgewatch.proxy.dialects.kind import Kind
from wedgewatch.proxy.dialects.typed import TypedRelay, error_event, event_type, has_text
from wedgewatch.proxy.dialects.whole import summary
from wedgewatch.wire.sse import DONE, SSEEvent

_DELTA = b'"delta":"'
_TERMINAL = frozenset({"response.completed", "response.incomplete"})
_DECODED = _TERMINAL | {"response.failed", "error"}


def is_progress(kind: str | None, data: bytes) -> bool:
    """Does this event carry generated tokens? Decodes JSON only when the bytes cannot tell."""
    i = data.find(_DELTA)
    if i >= 0:
        return data[i + len(_DELTA) : i + len(_DELTA) + 1] != b'"'
    if kind == "response.output_item.added":
        return b'"function_call"' in data or (b'": ' in data and _opens_call(decode(data)))
    if kind is not None and kind.endswith(".delta") and b'"delta"' in data:
        # Pretty-printed JSON, or a delta that is an object (vLLM's first Responses server sent
        # reasoning as "response.reasoning.delta" with {"content": "..."}): ask the decoded event.
        obj = decode(data)
        return obj is not None and has_text(obj.get("delta"))
    return False


def _opens_call(obj: dict[str, Any] | None) -> bool:
    item = obj.get("item") if obj is not None else None
    return isinstance(item, dict) and item.get("type") == "function_call"


def _error(kind: str | None, obj: dict[str, Any]) -> dict[str, Any]:
    """The upstream's error in the chat shape ``{"error": {...}}`` the endings read. The Responses
    API names its errors by word (``server_error``, ``invalid_prompt``, ...), not by HTTP status:
    an ``invalid_*`` code or ``context_length_exceeded`` is the request's fault (``status`` 400,
    so the row says ``client_error``); any other is the server's (500)."""
    if kind == "response.failed":
        resp = obj.get("response")
        err = resp.get("error") if isinstance(resp, dict) else None
        err = dict(err) if isinstance(err, dict) else {"message": "response.failed"}
    elif kind == "error":
        err = {k: v for k, v in obj.items() if k not in ("type", "sequence_number")}
    else:
        return obj
    code = err.get("code")
    if isinstance(code, str) and not code.isdigit() and "status" not in err:
        client = code.startswith("invalid_") or code == "context_length_exceeded"
        err["status"] = 400 if client else 500
    return {"error": err}


class ResponsesRelay(TypedRelay):
    """``relay.StreamRelay`` over a Responses API stream."""

    END = "response.completed"

    def __init__(self, watch: Watch, kind: Kind = "responses") -> None:
        super().__init__(watch, kind)

    def _see(self, ev: SSEEvent, now: float) -> None:
        """Classify one event: progress, the end, or an error."""
        data = ev.data
        assert data is not None
        kind = event_type(ev, b"response.") or event_type(ev, b"error")
        if data == DONE:  # not the API's end, but some servers and gateways add chat's [DONE]
            self.done = True
        elif is_progress(kind, data):
            self.watch.progress(now)
        elif kind in _DECODED or (kind is None and is_error(data)):
            obj = decode(data) or {}
            if kind in _TERMINAL:
                resp = obj.get("response")
                self.done = True
                self.usage, self.finish = summary("responses", resp if isinstance(resp, dict) else {})
                self.finish = self.finish or kind.rsplit(".", 1)[1]
            else:
                self.error = _error(kind, obj)

    def error_frame(self, obj: dict[str, Any]) -> bytes:
        """An ``error`` event (what a Responses client reads) that also holds the OpenAI error
        object under ``error``, which the OpenAI SDK raises as ``APIError`` at once, as it does
        for a chat stream."""
        err = obj.get("error") or {}
        return error_event(
            {"type": "error", "code": err.get("code"), "message": err.get("message"), "param": None, **obj}
        )
