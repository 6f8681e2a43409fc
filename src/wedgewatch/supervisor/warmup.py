"""What a fresh life is warmed with before real load: every name the run will ask for, and the
request shapes it will send.

The story's warm-up, two "Write hello world." requests to the base model, warms neither an
adapter nor a shape: on vLLM's CPU build with LoRA enabled, the first request with log
probabilities took 7.6 s and each after it 0.3-0.5 s (issue 40). So the plan is: the warm-up's
``count`` plain requests to each served name (the base model, then each LoRA adapter when
``every_model``, on servers that route by name), then one request per shape in ``shapes`` to each
name, then each table of ``requests`` as written (its shape said as ``requests[i]``). Each result
is kept with the name and shape it warmed (the life's ready row).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wedgewatch.config import ServerConfig
from wedgewatch.supervisor import profiles

TOOL = {
    "type": "function",
    "function": {
        "name": "write",
        "description": "Write a text.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
}
SHAPES: dict[str, dict[str, Any]] = {
    "logprobs": {"logprobs": True, "top_logprobs": 1},
    "json": {"response_format": {"type": "json_object"}},
    # tool_choice "none": vLLM 0.32 without --tool-call-parser refuses every other choice, "auto"
    # too (the default once tools are given: HTTP 400); "none" is taken by every server, and vLLM
    # still renders the tools into the prompt (unless --exclude-tools-when-tool-choice-none).
    "tools": {"tools": [TOOL], "tool_choice": "none"},
}
"""Each shape's fields, added to a warm-up request's body (``WarmupConfig.shapes``)."""


@dataclass(frozen=True)
class Step:
    """One warm-up request: the served name it asks for, its shape (None: plain), its fields."""

    model: str
    shape: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def label(self) -> dict[str, Any]:
        """What its result row says it warmed."""
        return {"model": self.model, "shape": self.shape}


def names(cfg: ServerConfig) -> list[str]:
    """The served names a warm-up covers: the base model's, then each adapter's (when
    ``every_model`` and the server routes by name; llama.cpp applies its adapters to every
    request and lists no names)."""
    out = [profiles.served_name(cfg)]
    if cfg.warmup.every_model and cfg.profile in profiles.NAME_ROUTED:
        out += sorted(cfg.lora_modules)
    return out


def plan(cfg: ServerConfig) -> list[Step]:
    """The warm-up's requests, in order: plain ones first, each name ``count`` times, then each
    shape once per name."""
    served = names(cfg)
    steps = [Step(n) for n in served for _ in range(cfg.warmup.count)]
    steps += [Step(n, shape, SHAPES[shape]) for shape in cfg.warmup.shapes for n in served]
    # Then each table of ``requests`` as it is written (its own model, or the base).
    steps += [
        Step(str(extra.get("model", served[0])), f"requests[{i}]", dict(extra))
        for i, extra in enumerate(cfg.warmup.requests)
    ]
    return steps
