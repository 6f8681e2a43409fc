"""The simulator's own faults, armed from outside.

A scenario's ``[[fault]]`` with a ``marker`` strikes only while its marker file is missing, and
creates it as it strikes (``sim/faults.py``): in this server process or any later one. So a fault
whose marker exists is disarmed; removing the marker arms it, and the next request the server
takes meets it, ``after_tokens`` into its reply. ``bench faults`` arms its fault before each
trial; ``bench chaos`` writes one fault per kind, every marker made, and arms one when its
schedule says so (on token progress), so the fault lands on a request in flight.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def with_marker(scenario: str, marker: Path) -> str:
    """``scenario`` (a TOML text) with every ``[[fault]]`` striking once per ``marker``."""
    return scenario.replace("[[fault]]\n", f"[[fault]]\nmarker = {json.dumps(str(marker))}\n")


@dataclass(frozen=True)
class Armed:
    """One fault of an armed scenario: its marker, and the fault's TOML fields (action first)."""

    name: str
    marker: Path
    fields: dict[str, Any]

    def toml(self) -> str:
        lines = ["[[fault]]", f"marker = {json.dumps(str(self.marker))}"]
        for key, value in self.fields.items():
            lines.append(f"{key} = {json.dumps(value)}")
        return "\n".join(lines) + "\n"

    def arm(self) -> None:
        self.marker.unlink(missing_ok=True)

    def disarm(self) -> None:
        self.marker.touch()

    @property
    def armed(self) -> bool:
        """Still waiting for a request (the marker is made when it strikes)."""
        return not self.marker.exists()


def scenario(
    folder: Path, faults: dict[str, dict[str, Any]], head: str = ""
) -> tuple[Path, dict[str, Armed]]:
    """A scenario file in ``folder`` with one fault per entry of ``faults`` (name -> TOML fields),
    each disarmed; ``head``: the scenario's other tables (its ``[server]`` speeds)."""
    folder.mkdir(parents=True, exist_ok=True)
    armed = {name: Armed(name, folder / f"{name}.marker", dict(fields)) for name, fields in faults.items()}
    for fault in armed.values():
        fault.disarm()
    path = folder / "armed.toml"
    path.write_text(head + "\n" + "\n".join(f.toml() for f in armed.values()))
    return path, armed


def struck(fault_log: Path, since: float = 0.0) -> list[dict[str, Any]]:
    """The simulator's own record of each request a fault struck (``--fault-log``), from ``since``."""
    if not fault_log.exists():
        return []
    lines = [json.loads(line) for line in fault_log.read_text().splitlines() if line.strip()]
    return [line for line in lines if float(line["ts"]) >= since]
