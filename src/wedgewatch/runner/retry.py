"""The retry policy: which attempt statuses are retried, and how an attempt's status is decided.

The decision of *what* to run next is the ledger view ``instance_next``; this module only names
the statuses (the view's SQL uses the same sets, and a test holds the two together) and turns an
agent's ending plus the proxy's records into one (status, reason).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from wedgewatch.errors import status_of
from wedgewatch.protocols import AgentResult

MODEL_SIDE = frozenset({"submitted", "early_stop"})
"""Final: the model's own doing. Retrying would inflate the score."""
RETRIED = frozenset({"api_error", "harness_error", "interrupted"})
"""Not the model's doing: the instance gets another attempt in a fresh sandbox."""
BUDGETED = frozenset({"api_error", "harness_error"})
"""Retried statuses that use up the `run.attempts` budget. `interrupted` does not: the run was
stopped (Ctrl-C, SIGKILL, a crash of wedgewatch), nothing about the instance failed, and a resume
must end with the outcome the run would have had without the stop."""
STATUSES = MODEL_SIDE | RETRIED


def decide(
    result: AgentResult | None,
    exc: BaseException | None,
    request_outcomes: Sequence[str],
    is_infra: Callable[[str], bool],
) -> tuple[str, str]:
    """The attempt's (status, reason).

    The proxy's records are the source of truth for the LLM path: if any request of the attempt
    ended with an infrastructure outcome, the attempt is ``api_error`` with that outcome as its
    reason (the first one), whatever the agent returned or raised. An agent that swallowed a 503
    and then "submitted" an empty patch must not score as the model failing.
    """
    for outcome in request_outcomes:
        if is_infra(outcome):
            return "api_error", outcome
    if exc is not None:
        return status_of(exc)
    if result is None:
        return "harness_error", "no_result"
    if result.status not in MODEL_SIDE:
        return "harness_error", f"bad_agent_status:{result.status}"
    return result.status, result.reason
