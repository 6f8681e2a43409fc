"""The runner: a suite, K instances at a time, one fresh sandbox per attempt, retries only for
what the infrastructure broke, every fact in the ledger, resumable after any stop.
See docs/runner.md.

Submodules import the agents, the proxy and the supervisor lazily where they can, so that
reading a ledger (report, export, import-report) does not load them.
"""

from __future__ import annotations

from wedgewatch.runner.retry import decide

__all__ = ["decide"]
