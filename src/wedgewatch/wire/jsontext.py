"""JSON text from a user's file, parsed so that no input escapes as anything but
``json.JSONDecodeError``: the readers of ``scan``, ``audit`` and the suites already turn that one
error into a line naming the file. The standard parser raises ``RecursionError`` on an array
nested some thousands deep (a file of 100,000 ``[``); here that is a decode error too.

``NaN`` and ``Infinity`` stay accepted, as Python's own ``json.dumps`` writes them: a reader that
wants a number checks it is finite (``finite``), so a NaN duration reads as no duration.
"""

from __future__ import annotations

import json
import math
from typing import Any


def loads(text: str | bytes) -> Any:
    """``json.loads`` that raises only ``json.JSONDecodeError`` (a ``ValueError``)."""
    try:
        return json.loads(text)
    except RecursionError:
        doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError("nested too deeply", doc[:100], 0) from None


def finite(value: float) -> float | None:
    """``value``, or None for NaN and the infinities (no duration, no count)."""
    return value if math.isfinite(value) else None
