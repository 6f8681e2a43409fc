"""Who writes the simulator's replies: a pluggable policy, picked by name from a registry.

The simulator asks the policy for a whole reply, then streams it token by token under its own
timing and fault model; a policy knows nothing of timing, faults or HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from wedgewatch.base import registry


@dataclass(slots=True)
class PolicyRequest:
    """What the policy sees of one generation request."""

    kind: Literal["chat", "completion"]
    model: str  # as requested: the base model's served name or a LoRA adapter's name
    messages: list[dict[str, Any]]  # OpenAI chat messages; a completion's prompt is one user message
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    seed: int = 0  # the simulator's --seed
    skill: float = 1.0  # the scenario's [policy] skill: share of instances the model solves


@dataclass(slots=True)
class PolicyReply:
    """A whole reply. The simulator tokenizes ``text`` and streams it; ``tool_calls`` are sent as
    vLLM streams them (each ``{"id": str, "name": str, "arguments": str}``)."""

    text: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    reasoning: str = ""


class Policy(Protocol):
    def reply(self, request: PolicyRequest) -> PolicyReply: ...


# name -> "module:attribute"; imported lazily so the simulator starts without loading every policy.
REGISTRY: dict[str, str] = {
    "filler": "wedgewatch.sim.filler:FillerPolicy",
    "swe": "wedgewatch.sim.swe_policy:SwePolicy",
}


def get_policy(name: str) -> Policy:
    """Instantiate the policy registered as ``name``; BadInput names the flag if it is unknown."""
    cls = registry.load(REGISTRY, name, "--policy", "policy")
    policy: Policy = cls()
    return policy
