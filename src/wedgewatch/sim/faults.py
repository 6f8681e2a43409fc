"""Scripted faults: which fault, if any, a request meets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from wedgewatch.sim.scenario import Fault


@dataclass(slots=True)
class RequestKey:
    """What the fault matchers look at."""

    nth: int  # 1-based, among accepted generation requests since process start
    text: str  # last user message, or the completion prompt
    model: str


class FaultBook:
    """The scenario's faults in file order, each with the count of requests it has struck."""

    def __init__(self, faults: list[Fault]) -> None:
        self.faults = faults
        self.used = [0] * len(faults)

    def match(self, key: RequestKey) -> Fault | None:
        """The first fault whose conditions all hold and whose ``times`` is not used up."""
        for i, f in enumerate(self.faults):
            if f.times and self.used[i] >= f.times:
                continue
            w = f.when
            if w.nth is not None and w.nth != key.nth:
                continue
            if w.contains is not None and w.contains not in key.text:
                continue
            if w.model is not None and w.model != key.model:
                continue
            if f.marker is not None:
                try:  # created once, atomically: two processes cannot both strike
                    Path(f.marker).touch(exist_ok=False)
                except FileExistsError:
                    continue
            self.used[i] += 1
            return f
        return None
