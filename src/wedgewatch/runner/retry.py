"""How an attempt's status is decided: an agent's ending plus the proxy's records give one
(status, reason).

What a status means for the instance (final, retried, budgeted, requeued) is the retry rule in
``wedgewatch.base.vocab``; the ledger view ``instance_next``, built from the same sets, says what
to run next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from wedgewatch.base.errors import status_of
from wedgewatch.base.protocols import AgentResult
from wedgewatch.base.vocab import API_ERROR, HARNESS_ERROR, MODEL_SIDE


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
            return API_ERROR, outcome
    if exc is not None:
        return status_of(exc)
    if result is None:
        return HARNESS_ERROR, "no_result"
    if result.status not in MODEL_SIDE:
        return HARNESS_ERROR, f"bad_agent_status:{result.status}"
    return result.status, result.reason
