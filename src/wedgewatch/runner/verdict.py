"""What an evaluation decided (``evaluations.detail_json``): the local evaluation's and the
official grading's (``runner.official``) alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Verdict:
    resolved: int  # 1 or 0
    verdict: str
    tests: dict[str, str] = field(default_factory=dict)
    duration: float = 0.0
    exit_code: int | None = None
    output_tail: str = ""

    def detail(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "tests": self.tests,
            "duration": round(self.duration, 3),
            "exit_code": self.exit_code,
            "output_tail": self.output_tail,
        }
