"""The supervisor: fresh server lives, real readiness, warm-up, wedge detection by token progress,
restarts, and a ledger row for each of them. See docs/supervisor.md."""

from wedgewatch.supervisor.profiles import REGISTRY as PROFILES
from wedgewatch.supervisor.supervisor import Supervisor

__all__ = ["PROFILES", "Supervisor"]
