"""Scenario files: scripted faults, start-up behaviour, timing and the stochastic wedge, in TOML.

A scenario is named (a file bundled in ``wedgewatch/sim/scenarios``) or given as a path. Every
table is validated; a bad file raises ``ScenarioError(file, field, message)``.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wedgewatch.base.errors import ScenarioError

Action = Literal[
    "stall_ttft",
    "stall_after",
    "trickle",
    "http_error",
    "drop",
    "crash",
    "wedge",
    "wedge_in_prefill",
    "livelock",
    "engine_death",
    "error_event",
    "html_200",
    "not_json",
    "unfinished",
    "endless_line",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class When(_Strict):
    nth: int | None = Field(None, ge=1)
    """The n-th generation request since process start (1-based, counting accepted requests)."""
    contains: str | None = None
    """The last user message (or a completion's prompt) contains this string."""
    model: str | None = None
    """The request's ``model`` equals this (a served name or a LoRA adapter)."""


class Fault(_Strict):
    when: When = Field(default_factory=When)
    times: int = Field(0, ge=0)
    """How many matching requests the fault applies to; 0 = every one."""
    marker: str | None = None
    """A file the fault creates when it strikes; while the file exists the fault does not strike
    again, in this server process or any later one. ``times`` counts within one process, so a
    fault meant to strike once across a restart (a wedge the next life does not repeat, as a
    fresh server is the cure) names a marker."""
    action: Action
    after_tokens: int = Field(0, ge=0)
    """stall_after, drop, crash, wedge, livelock, engine_death, error_event and the broken replies (not_json,
    unfinished, endless_line): tokens sent before the fault strikes. wedge_in_prefill: prompt
    tokens prefilled before the server wedges (0: half the prompt)."""
    rate: float = Field(0.5, gt=0)
    """trickle: tokens per second (multiplied by --time-scale, as every duration is divided)."""
    status: int = Field(503, ge=400, le=599)
    """http_error: the status answered."""
    exit_code: int = Field(1, ge=0, le=255)
    """crash, engine_death: the process's exit code."""
    gauges: Literal["frozen", "zero"] = "frozen"
    """wedge, wedge_in_prefill: what /metrics shows once the engine is wedged. `frozen`: every
    series as it was at that moment. `zero`: the counters frozen, but the running and waiting
    gauges and the KV usage read 0, as a capture of vLLM #46811 showed (a wedge the server's own
    gauges do not admit to)."""
    exit_delay: float = Field(0.0, ge=0)
    """crash: seconds between the server's sockets closing and the process exiting, in which it
    answers nothing and cannot yet be reaped (a server that takes a moment to die); 0 = at once.
    engine_death: seconds between the engine's death and the process's exit, in which the server
    answers /health 503 and every generation 500 (vLLM's watchdog: up to 5 s)."""
    ignore_sigterm: bool = False
    """wedge: once wedged, the process ignores SIGTERM and only SIGKILL ends it (a stuck
    llama-server needed `kill -9`, llama.cpp #27388). `[startup] ignore_sigterm` does it from the
    start."""
    error_event: bool = False
    """crash: the stream's last event is the server's error (vLLM's EngineDeadError after HTTP
    200) before the process exits, as vLLM #48966 shows it."""


class Startup(_Strict):
    unready_seconds: float = Field(0.0, ge=0)
    """/health (and generations) answer 503 for this long after the socket listens."""
    exit_code: int | None = Field(None, ge=0, le=255)
    """Exit with this code before listening."""
    ignore_sigterm: bool = False
    """SIGTERM is ignored, so a supervisor must SIGKILL."""


class Server(_Strict):
    tokens_per_s: float = Field(50.0, gt=0)
    """Decode rate of each stream: a 256-token reply takes about 5 s (at --time-scale 1)."""
    prefill_tokens_per_s: float = Field(4000.0, gt=0)
    """Prefill rate: an 8,000-token prompt waits 2 s for its first token."""
    max_num_seqs: int | None = Field(None, ge=1)
    """Concurrent generations; --max-num-seqs overrides it (default 256, as vLLM's)."""
    kv_cache_tokens: int = Field(262144, ge=1)
    """KV-cache capacity in tokens, behind vllm:kv_cache_usage_perc; when it is full the latest
    admitted request is preempted."""
    max_num_batched_tokens: int = Field(2048, ge=16)
    """Prefill chunk size, as vLLM's --max-num-batched-tokens: the KV usage moves once a chunk."""


class PolicySection(_Strict):
    skill: float = Field(1.0, ge=0, le=1)
    """Passed to the policy as PolicyRequest.skill."""


class Wedge(_Strict):
    """The stochastic wedge: a per-request hazard (see docs/simulator.md for the formula)."""

    base_hazard: float = Field(0.0, ge=0)
    """Per-request hazard of a fresh, warm server: base model, one running request,
    prefix caching off, eager mode on (the safest configuration)."""
    cold_requests: int = Field(0, ge=0)
    """The first N generation requests of a server life (age included) are cold."""
    cold_multiplier: float = Field(1.0, ge=0)
    age_multiplier: float = Field(1.0, ge=1)
    """Hazard multiplier of a fully used server; age ramps it up along a logistic curve."""
    age_midpoint_requests: float = Field(1500.0, gt=0)
    age_width_requests: float = Field(150.0, gt=0)
    concurrency_exponent: float = Field(0.0, ge=0)
    """Hazard x running^exponent, running counted with the new request."""
    prefix_caching_multiplier: float = Field(1.0, ge=0)
    """Hazard x this when prefix caching is on (no --no-enable-prefix-caching)."""
    cuda_graphs_multiplier: float = Field(1.0, ge=0)
    """Hazard x this when CUDA graphs are on (no --enforce-eager)."""
    lora_multiplier: float = Field(1.0, ge=0)
    """The general hazard x this for a request to a LoRA adapter."""
    lora_scale_requests: float = Field(0.0, ge=0)
    """An adapter's own wear-out: Weibull cumulative hazard (n/scale)^shape over the adapter's
    requests n since start; 0 turns it off."""
    lora_shape: float = Field(5.0, gt=0)


class Scenario(_Strict):
    name: str = ""
    description: str = ""
    fault: list[Fault] = Field(default_factory=list)
    startup: Startup = Field(default_factory=Startup)
    server: Server = Field(default_factory=Server)
    policy: PolicySection = Field(default_factory=PolicySection)
    wedge: Wedge | None = None
    ground_truth: dict[str, Any] = Field(default_factory=dict)
    """Free-form: what the scenario's fault model means, for checking analyses against."""


def bundled_names() -> list[str]:
    folder = resources.files("wedgewatch.sim") / "scenarios"
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml"))


def _field(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(root)"


def parse_scenario(text: str, source: str) -> Scenario:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(source, None, f"not valid TOML: {exc}") from None
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ScenarioError(source, _field(tuple(err["loc"])), err["msg"]) from None


def load_scenario(name_or_file: str) -> Scenario:
    """A bundled scenario by name, or a TOML file by path."""
    path = Path(name_or_file)
    if name_or_file.endswith(".toml") or path.exists():
        try:
            text = path.read_text()
        except OSError as exc:
            raise ScenarioError(name_or_file, None, f"cannot read: {exc.strerror}") from None
        scenario = parse_scenario(text, name_or_file)
    else:
        res = resources.files("wedgewatch.sim") / "scenarios" / f"{name_or_file}.toml"
        if not res.is_file():
            raise ScenarioError(
                name_or_file,
                None,
                f"no such file or bundled scenario (bundled: {', '.join(bundled_names())})",
            )
        scenario = parse_scenario(res.read_text(), f"{name_or_file} (bundled)")
    if not scenario.name:
        scenario.name = path.stem
    return scenario
