"""The model replies an agent acted on, request by request, read where they already are: the agent's
own trajectory (``<workdir>/<run>/<attempt>/trajectory.json``; the proxy's hot path is not
widened by a byte). Each assistant message of a trajectory's conversation is a reply the agent
acted on; the messages before it are the request it answered.

A request is named by a hash of its messages, each as the proxy fingerprints it
(``wire/fingerprint.py``: role and text, whitespace collapsed), after what a tool's output says
about the moment rather than the repository is masked in the agent's observations: a duration
(pytest's ``4 passed in 0.08s``), a clock time, the sandbox's own path (its directory is named
after the run and the attempt). Two fault-free runs differ there and nowhere else on the bundled
suite; the control shows whether the masks leave anything that varies. A reply is named by the
SHA-256 of its text, unmasked.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from wedgewatch.wire import fingerprint


@dataclass(frozen=True)
class Exchange:
    """One request of an attempt and the reply the agent acted on."""

    instance_id: str
    attempt_id: str
    step: int
    request: str
    """The request's fingerprint: a hash of its messages' hashes (the ledger's ``fp``)."""
    reply: str
    """SHA-256 of the reply's text."""
    text: str
    messages: tuple[dict[str, str], ...]
    started: float | None
    """When the agent sent it (the trajectory's turn, to the second)."""
    attempt_dir: str = ""


MASKS = (
    (re.compile(r"\b\d+m\d+\.\d+s\b"), "<duration>"),  # time's 0m0.012s
    (re.compile(r"\b\d+(\.\d+)?(s|ms)\b"), "<duration>"),  # pytest's "in 0.08s", "0.01s call"
    (re.compile(r"\b\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\b"), "<time>"),  # ls -l, date, logs
)


def mask(text: str, attempt_dir: str = "") -> str:
    """An observation with its durations, clock times and sandbox path masked."""
    if attempt_dir:
        text = text.replace(attempt_dir, "<attempt>")
    for pattern, repl in MASKS:
        text = pattern.sub(repl, text)
    return text


def request_key(messages: list[Any] | tuple[Any, ...], attempt_dir: str = "") -> str:
    """The request's name: its messages' fingerprints, the user's (the agent's observations)
    masked."""
    hashes = [
        fingerprint.message_hash(
            str(m.get("role", "")),
            mask(fingerprint.text_of(m.get("content")), attempt_dir)
            if m.get("role") == "user"
            else fingerprint.text_of(m.get("content")),
        )
        for m in messages
    ]
    return hashlib.sha256("".join(hashes).encode()).hexdigest()[:16]


def reply_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _ts(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def of_trajectory(data: dict[str, Any], attempt_dir: str = "") -> Iterator[Exchange]:
    messages = list(data.get("messages") or [])
    turns = list(data.get("turns") or [])
    step = 0
    for i, msg in enumerate(messages):
        if msg.get("role") != "assistant":
            continue
        started = _ts(turns[step].get("started_at")) if step < len(turns) else None
        step += 1
        request = messages[:i]
        yield Exchange(
            str(data.get("instance_id", "")),
            str(data.get("attempt_id", "")),
            step,
            request_key(request, attempt_dir),
            reply_key(str(msg.get("content") or "")),
            str(msg.get("content") or ""),
            tuple(request),
            started,
            attempt_dir,
        )


def exchanges(workdir: Path, run_id: str) -> list[Exchange]:
    """Every exchange of every attempt of the run (a trajectory missing or unreadable has none:
    an attempt killed before its first save)."""
    out: list[Exchange] = []
    for path in sorted((workdir / run_id).glob("*/trajectory.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        out.extend(of_trajectory(data, str(path.parent.resolve())))
    return out


@dataclass
class Comparison:
    """The replies of one run held against another's, request by request."""

    equal: int = 0
    differing: list[tuple[Exchange, Exchange]] = field(default_factory=list)
    """(this run's, the control's) for the same request and another reply."""
    unmatched: list[tuple[Exchange, str]] = field(default_factory=list)
    """A request the control never sent, and the first message where its conversation departs
    from the control's for that instance."""

    @property
    def held(self) -> bool:
        return not self.differing and not self.unmatched


def _departure(e: Exchange, control: list[Exchange]) -> str:
    """Where ``e``'s conversation first departs from the control's that shares most of it (of
    two sharing as much, one that goes on past it: it shows what the control had there)."""
    mine = [request_key([m], e.attempt_dir) for m in e.messages]
    best: tuple[int, bool] = (-1, False)
    where = ""
    for c in control:
        if c.instance_id != e.instance_id:
            continue
        theirs = [request_key([m], c.attempt_dir) for m in c.messages]
        k = next(
            (i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b),
            min(len(mine), len(theirs)),
        )
        departs = k < len(mine) and k < len(theirs)
        if (k, departs) <= best:
            continue
        best = (k, departs)
        if departs:
            a, b = (
                fingerprint.text_of(e.messages[k].get("content")),
                fingerprint.text_of(c.messages[k].get("content")),
            )
            at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            where = (
                f"message {k + 1} ({e.messages[k]['role']}) differs at character {at}: "
                f"{a[max(0, at - 30) : at + 50]!r} where the control has {b[max(0, at - 30) : at + 50]!r}"
            )
        else:
            where = f"the control's conversation ends after {len(theirs)} messages"
    return where or "the control has no attempt at this instance"


def compare(run: list[Exchange], control: list[Exchange]) -> Comparison:
    by_request = {c.request: c for c in control}
    out = Comparison()
    for e in run:
        c = by_request.get(e.request)
        if c is None:
            out.unmatched.append((e, _departure(e, control)))
        elif c.reply != e.reply:
            out.differing.append((e, c))
        else:
            out.equal += 1
    return out
