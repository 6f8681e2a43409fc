"""The demo's arms: one harness each, on the same server condition.

Every arm runs the same suite, seed, scenario, flags and (with ``--lora``) adapter; only the
harness differs: the client's deadline and retries, whether a watchdog stands between agent and
server, whether the server is warmed and restarted, how many attempts an instance gets, and
whether infrastructure failures are reported apart from the score. Arms are a string registry.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import BadInput
from wedgewatch.config import Config, validate

# The proxy as a recorder only (``watchdog.record_only``): one ledger row per request (the model it
# named, how long it waited), never a deadline or an engine-stop verdict. Arms that stand for a
# harness without wedgewatch get it, so that every arm's cells come from the same rows.
RECORDER = {"record_only": True}
# The SDK's defaults: 600 s and two silent retries (the story's 1,802 s per hung request).
SDK_DEFAULTS = {"client_timeout": 600.0, "client_retries": 2}
NO_RESTARTS = {"restart_on_wedge": False, "restart_on_crash": False, "restart_after_api_errors": 0}
# A harness without wedgewatch counts every failed attempt against its budget: no requeue.
NO_REQUEUE = {"max_requeues": 0}
ADAPTER = ("story-lora", "/adapters/story-lora")
"""The seed's adapter, served under its own name (the simulator takes any path)."""


@dataclass(frozen=True)
class Arm:
    name: str
    title: str
    """The column header: what the arm stands for."""
    reports_infra_apart: bool
    """True when the harness reports infra_failed beside its score (wedgewatch); False when every
    instance not resolved is scored as the model's failure (harnesses without wedgewatch)."""
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Config sections merged over the common config."""


ARMS: dict[str, Arm] = {
    a.name: a
    for a in (
        Arm(
            "naive",
            "naive (SDK defaults)",
            False,
            {
                "server": {"warmup": {"count": 0}, **NO_RESTARTS},
                "watchdog": RECORDER,
                "agent": SDK_DEFAULTS,
                "run": {"attempts": 1, **NO_REQUEUE},
            },
        ),
        Arm("guarded", "guarded (wedgewatch)", True),
        Arm(
            "story-fix",
            "story-fix (240 s, 3 attempts)",
            False,
            {
                # The story's own fix: a fresh server warmed twice, a 240 s client deadline without
                # retries, three task-level attempts, a restart after two API errors in a row.
                "server": {"warmup": {"count": 2}, **NO_RESTARTS, "restart_after_api_errors": 2},
                "watchdog": RECORDER,
                "agent": {"client_timeout": 240.0, "client_retries": 0},
                "run": {"attempts": 3, **NO_REQUEUE},
            },
        ),
        Arm(
            "fresh-naive",
            "fresh-naive (SDK defaults, warmed)",
            False,
            {
                "server": {"warmup": {"count": 2}, **NO_RESTARTS},
                "watchdog": RECORDER,
                "agent": SDK_DEFAULTS,
                "run": {"attempts": 1, **NO_REQUEUE},
            },
        ),
    )
}
DEFAULT_ARMS = ("naive", "guarded")


def parse_arms(text: str) -> list[str]:
    """``--arms naive,guarded,...``: known names, each once, in the order given."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ARMS]
    if not names or unknown:
        raise BadInput(f"--arms: unknown arm {', '.join(unknown) or '(none)'} (known: {', '.join(ARMS)})")
    if len(set(names)) != len(names):
        raise BadInput(f"--arms: an arm is named twice ({text})")
    return names


def parse_set(specs: list[str]) -> dict[str, dict[str, Any]]:
    """``--set ARM:section.field=VALUE`` (VALUE as JSON, else a string), for one arm."""
    import json

    out: dict[str, dict[str, Any]] = {}
    for spec in specs:
        arm, _, rest = spec.partition(":")
        path, eq, raw = rest.partition("=")
        if arm not in ARMS or not eq or "." not in path:
            raise BadInput(
                f"--set: expected ARM:section.field=VALUE with ARM one of {', '.join(ARMS)}, got {spec!r}"
            )
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        node = out.setdefault(arm, {})
        *parents, leaf = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> None:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)


@dataclass(frozen=True)
class Condition:
    """What every arm shares: the server condition and the workload."""

    out_dir: Path
    scenario: str
    seed: int
    time_scale: float
    instances: int
    concurrency: int
    step_limit: int
    lora: bool


def arm_config(arm: str, cond: Condition, extra: dict[str, Any] | None = None) -> Config:
    """The run config of one arm at one seed: the common config, the arm's harness, ``--set``."""
    out = cond.out_dir.resolve()
    data: dict[str, Any] = {
        "server": {
            "profile": "sim",
            "model": "sim-model",
            "scenario": cond.scenario,
            "arg_sets": ["hybrid-safe"],
            "args": ["--policy", "swe"],
            "log_dir": str(out / "logs" / f"{arm}-s{cond.seed}"),
            # Supervisor windows in the server's seconds; run.time_scale divides them.
            "wedge_window": 60.0,
            "canary_timeout": 20.0,
        },
        "watchdog": {},
        "agent": {"name": "bash", "step_limit": cond.step_limit},
        "suite": {"slice": f"0:{cond.instances}"},
        "run": {
            "concurrency": cond.concurrency,
            "ledger": str(out / "ledger.sqlite"),
            "workdir": str(out / "work"),
            "time_scale": cond.time_scale,
            "seed": cond.seed,
        },
    }
    if cond.lora:
        data["server"]["lora_modules"] = {ADAPTER[0]: ADAPTER[1]}
        data["agent"]["model"] = ADAPTER[0]
    _merge(data, ARMS[arm].overrides)
    _merge(data, extra or {})
    return validate(data, f"demo arm {arm}")
