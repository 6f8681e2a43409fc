"""The client's request body as the proxy sends it upstream: always streamed, always with usage.

Streaming upstream is what lets the watchdog see progress token by token whatever the client asked
for; ``include_usage`` gives every row its token counts. What the client itself asked for (a stream
or one answer, usage or not) is kept, so its answer has the shape it expects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Asked:
    body: dict[str, Any]  # as sent upstream
    payload: bytes  # ``body`` encoded
    model: str | None
    client_stream: bool
    want_usage: bool  # the client asked for the usage chunk itself


def rewrite(raw: bytes) -> Asked | None:
    """None when the body is not a JSON object (the client's error, answered 400)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    model = body.get("model")
    client_stream = body.get("stream") is True
    opts = body.get("stream_options")
    opts = opts if isinstance(opts, dict) else {}
    body["stream"] = True
    body["stream_options"] = {**opts, "include_usage": True}
    return Asked(
        body=body,
        payload=json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(),
        model=model if isinstance(model, str) else None,
        client_stream=client_stream,
        want_usage=client_stream and opts.get("include_usage") is True,
    )
