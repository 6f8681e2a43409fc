"""Reading a command's output with a deadline and a memory bound.

A command such as ``yes`` or ``cat`` of a huge file would fill memory long before its timeout, so
only the first and last ``HALF`` bytes are kept, with a note of how much was dropped between them.
"""

from __future__ import annotations

import os
import selectors
import time
from typing import IO

HALF = 512 * 1024


def read_bounded(stream: IO[bytes], deadline: float, half: int = HALF) -> tuple[str, bool]:
    """Read ``stream`` until EOF or the monotonic ``deadline``; return (text, timed_out)."""
    head = bytearray()
    tail = bytearray()
    dropped = 0
    fd = stream.fileno()
    timed_out = False
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if not sel.select(min(left, 1.0)):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            room = half - len(head)
            if room > 0:
                head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                tail += chunk
                if len(tail) > half:
                    dropped += len(tail) - half
                    del tail[: len(tail) - half]
    text = head.decode("utf-8", errors="replace")
    if dropped:
        text += f"\n[... {dropped} bytes of output dropped ...]\n"
    return text + tail.decode("utf-8", errors="replace"), timed_out
