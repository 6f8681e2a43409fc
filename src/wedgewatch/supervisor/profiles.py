"""Server profiles: a string registry of how to launch, probe and watch each kind of server.

A profile knows the launch argv, which metric series show token progress (the first counter is
the generated-tokens counter, used for a life's age in tokens), which gauge shows running
requests, its named argument sets, how LoRA adapters are passed, and which flag caps concurrency.
Sources for every flag and metric name are in docs/supervisor.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from wedgewatch.base.errors import ConfigError
from wedgewatch.config import ServerConfig

Argv = list[str]

HYBRID_SAFE_VLLM = ("--no-enable-prefix-caching", "--enforce-eager")
"""The story's flags: prefix caching off (the Mamba 'align' cache path), CUDA graphs off."""
SCALE_OUT_VLLM = ("--enable-scale-out",)
"""vLLM 0.32's render and token-in endpoints (`/v1/responses/render`, `/v1/messages/render`,
`/inference/v1/generate`), from which the proxy continues a begun Responses or Messages stream
(proxy/resume/typed_ids.py); without them such a stream is replayed. An older vLLM refuses the
flag, so it is a set to name, not a default."""

XLLAMACPP_MODULE = "wedgewatch.launchers.llamacpp"
VLLM_CPU = "vllm-cpu"
"""``server.launcher`` of the vllm profile that runs the bundled vLLM-on-CPU launcher."""
VLLM_CPU_MODULE = "wedgewatch.launchers.vllm"
BUNDLED_MODEL = "gemma3-270m"
"""The xllamacpp launcher serves its bundled Gemma 3 270M when no model file is named."""


@dataclass(frozen=True)
class Profile:
    name: str
    build: Callable[[ServerConfig, str, int], Argv] | None
    """Launch argv for (config, host, port) without arg sets, LoRA flags or extra args; None when
    wedgewatch does not launch the server (external)."""
    token_counters: tuple[str, ...] = ()
    running_gauge: str | None = None
    waiting_gauge: str | None = None
    heartbeat: tuple[str, ...] = ()
    """Series that change on every engine step, prefill chunks included (docs/supervisor.md
    cites each in its server's source); empty: the server has none and only tokens count."""
    preemptions: str | None = None
    """Series of requests sent back to waiting (preempted, retracted): a counter, or SGLang's
    gauge of the last batch's retractions (a rise is read as that many)."""
    arg_sets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    lora: Callable[[Mapping[str, str]], Argv] | None = None
    concurrency_flags: tuple[str, ...] = ()
    """Flags whose value is the number of requests the server runs at once."""
    health_path: str = "/health"
    canary_path: str | None = None
    """A GET endpoint that generates a token (SGLang's /health_generate); None: a 1-token chat."""
    owned: bool = True
    """False for a server wedgewatch does not start or stop (external)."""
    continuation: str | None = None
    """How the server continues a reply the proxy has begun to relay, for a request resumed on a
    new life (docs/proxy.md, "Resume"): `token_ids` (exactly, from the token ids the server
    generated: it returns them and takes ids as a completion's prompt, vLLM; by the text as
    `continue` where the ids are missing), `continue` (a last assistant message with
    `continue_final_message` and `add_generation_prompt` off: SGLang, the simulator), `prefill` (a
    last assistant message is continued as it is: llama.cpp), None (begun replies cannot be
    continued; requests the client has received nothing of are still sent again)."""
    missing: str = ""
    """What to do when the launcher is not found (said after "cannot run ...")."""


def served_name(cfg: ServerConfig) -> str:
    """The name clients put in ``model``."""
    return cfg.served_model_name or cfg.model


def _vllm(cfg: ServerConfig, host: str, port: int) -> Argv:
    # The CPU launcher takes `vllm serve`'s command line, so only the program differs.
    program = (
        [sys.executable, "-m", VLLM_CPU_MODULE] if cfg.launcher == VLLM_CPU else [cfg.launcher or "vllm"]
    )
    argv = [*program, "serve", cfg.model, "--host", host, "--port", str(port)]
    if cfg.served_model_name:
        argv += ["--served-model-name", cfg.served_model_name]
    return argv


def _sim(cfg: ServerConfig, host: str, port: int) -> Argv:
    return [
        *([cfg.launcher] if cfg.launcher else [sys.executable, "-m", "wedgewatch"]),
        "sim",
        "--host",
        host,
        "--port",
        str(port),
        "--served-model-name",
        served_name(cfg),
        "--scenario",
        cfg.scenario,
        "--time-scale",
        repr(cfg.time_scale),
    ]


def _sglang(cfg: ServerConfig, host: str, port: int) -> Argv:
    argv = [cfg.launcher or "python3", "-m", "sglang.launch_server", "--model-path", cfg.model]
    argv += ["--host", host, "--port", str(port), "--enable-metrics"]
    if cfg.served_model_name:
        argv += ["--served-model-name", cfg.served_model_name]
    return argv


def _llamacpp(cfg: ServerConfig, host: str, port: int) -> Argv:
    if cfg.launcher == "xllamacpp":
        argv = [sys.executable, "-m", XLLAMACPP_MODULE]
        if cfg.model != BUNDLED_MODEL:
            argv += ["--model", cfg.model]
    else:
        argv = [cfg.launcher or "llama-server", "-m", cfg.model]
    # An alias makes /v1/models list exactly the name readiness looks for.
    return [*argv, "--host", host, "--port", str(port), "--metrics", "--alias", served_name(cfg)]


def _command(cfg: ServerConfig, host: str, port: int) -> Argv:
    values = {"host": host, "port": str(port), "model": cfg.model, "served_model_name": served_name(cfg)}
    return [part.format(**values) for part in cfg.command]


def _vllm_lora(mods: Mapping[str, str]) -> Argv:
    # vLLM's --lora-modules takes every adapter after one flag (nargs='+').
    return ["--enable-lora", "--lora-modules", *(f"{k}={v}" for k, v in mods.items())]


def _sglang_lora(mods: Mapping[str, str]) -> Argv:
    return ["--enable-lora", "--lora-paths", *(f"{k}={v}" for k, v in mods.items())]


def _llamacpp_lora(mods: Mapping[str, str]) -> Argv:
    # llama-server applies adapters to every request and does not name them in /v1/models.
    return ["--lora", ",".join(mods.values())]


CONTINUE = "continue"
"""A begun reply is continued by its text as a last assistant message, with vLLM's and SGLang's
`continue_final_message: true, add_generation_prompt: false`."""
PREFILL = "prefill"
"""A begun reply is continued by its text as a last assistant message, which llama.cpp's server
continues as it is (its assistant prefill)."""
TOKEN_IDS = "token_ids"
"""A begun reply is continued exactly, from the token ids the server generated: the proxy asks for
them (vLLM's `return_token_ids`) and sends the next life a completion whose prompt is the
prompt's ids and the generated ones (proxy/resume/token_ids.py); by its text as `continue` where the ids
are missing."""

_VLLM = Profile(
    "vllm",
    _vllm,
    token_counters=("vllm:generation_tokens_total", "vllm:prompt_tokens_total"),
    running_gauge="vllm:num_requests_running",
    waiting_gauge="vllm:num_requests_waiting",
    # KV usage is set from the scheduler's stats after every executed step, prefill chunks that
    # emit no token included; iteration_tokens_total is observed once per step with outputs.
    heartbeat=("vllm:kv_cache_usage_perc", "vllm:iteration_tokens_total_count"),
    preemptions="vllm:num_preemptions_total",
    arg_sets={"hybrid-safe": HYBRID_SAFE_VLLM, "scale-out": SCALE_OUT_VLLM},
    lora=_vllm_lora,
    concurrency_flags=("--max-num-seqs",),
    continuation=TOKEN_IDS,
    missing=f'install vLLM on a GPU machine, set server.launcher to its `vllm` program, or "{VLLM_CPU}" for vLLM on the CPU',
)

REGISTRY: dict[str, Profile] = {
    "vllm": _VLLM,
    # The simulator takes vLLM's flags and exposes vLLM's series: the same profile, another launcher.
    # It returns no token ids (its tokens are words of text): its replies are continued by text.
    "sim": replace(_VLLM, name="sim", build=_sim, missing="", continuation=CONTINUE),
    "sglang": Profile(
        "sglang",
        _sglang,
        token_counters=("sglang:generation_tokens_total", "sglang:prompt_tokens_total"),
        running_gauge="sglang:num_running_reqs",
        waiting_gauge="sglang:num_queue_reqs",
        # realtime_tokens_total{mode="prefill_compute"} grows with every prefill batch (each
        # chunk), {mode="decode"} with every decode iteration; the other series every few steps.
        heartbeat=("sglang:realtime_tokens_total", "sglang:token_usage"),
        # A gauge (requests retracted by the last decode batch), not a counter: read once on a
        # real SGLang 0.5.23, which has no `sglang:num_retracted_requests_total`. A rise of it
        # still counts as movement, and as that many preemptions.
        preemptions="sglang:num_retracted_reqs",
        arg_sets={"hybrid-safe": ("--disable-radix-cache", "--disable-cuda-graph")},
        lora=_sglang_lora,
        concurrency_flags=("--max-running-requests",),
        canary_path="/health_generate",
        continuation=CONTINUE,
        missing="set server.launcher to the Python that has SGLang installed",
    ),
    "llamacpp": Profile(
        "llamacpp",
        _llamacpp,
        # llama.cpp adds to tokens_predicted_total only when a request ends; n_decode_total rises
        # with every decode step, so it is what shows progress while a long generation runs.
        token_counters=(
            "llamacpp:tokens_predicted_total",
            "llamacpp:prompt_tokens_total",
            "llamacpp:n_decode_total",
        ),
        running_gauge="llamacpp:requests_processing",
        waiting_gauge="llamacpp:requests_deferred",
        # One per llama_decode call, prompt batches included (measured, docs/supervisor.md).
        heartbeat=("llamacpp:n_decode_total",),
        lora=_llamacpp_lora,
        concurrency_flags=("-np", "--parallel"),
        continuation=PREFILL,
        missing='put llama-server on PATH, or set server.launcher = "xllamacpp" for the bundled launcher',
    ),
    "command": Profile("command", _command),
    # Watched like vLLM unless the config names other series; never launched or stopped by us.
    "external": Profile(
        "external",
        None,
        token_counters=_VLLM.token_counters,
        running_gauge=_VLLM.running_gauge,
        waiting_gauge=_VLLM.waiting_gauge,
        heartbeat=_VLLM.heartbeat,
        preemptions=_VLLM.preemptions,
        owned=False,
    ),
}


@dataclass(frozen=True)
class Series:
    """The metric series one server life is watched by."""

    token_counters: tuple[str, ...]
    running_gauge: str | None
    waiting_gauge: str | None
    heartbeat: tuple[str, ...] = ()
    preemptions: str | None = None

    def names(self) -> list[str]:
        names = (
            *self.token_counters,
            self.running_gauge,
            self.waiting_gauge,
            *self.heartbeat,
            self.preemptions,
        )
        return list(dict.fromkeys(n for n in names if n))


def get_profile(name: str, source: str = "config") -> Profile:
    profile = REGISTRY.get(name)
    if profile is None:
        known = ", ".join(sorted(REGISTRY))
        raise ConfigError(source, "server.profile", f"unknown profile {name!r} (known: {known})")
    return profile


def check(cfg: ServerConfig, source: str = "config") -> Profile:
    """Everything about ``cfg`` that only the profile can judge; ConfigError names the field."""
    profile = get_profile(cfg.profile, source)
    for name in cfg.arg_sets:
        if name not in profile.arg_sets:
            known = ", ".join(sorted(profile.arg_sets)) or "none"
            raise ConfigError(
                source, "server.arg_sets", f"profile {profile.name} has no arg set {name!r} (known: {known})"
            )
    if cfg.lora_modules and profile.lora is None:
        raise ConfigError(source, "server.lora_modules", f"profile {profile.name} takes no LoRA adapters")
    if profile.name == "command" and not cfg.command:
        raise ConfigError(source, "server.command", "the command profile needs a launch argv")
    if profile.name == "command":
        try:
            _command(cfg, "127.0.0.1", 1)
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(source, "server.command", f"bad placeholder {exc}") from None
    if profile.name == "external" and not cfg.url:
        raise ConfigError(source, "server.url", "the external profile needs the server's URL")
    if cfg.launcher == "xllamacpp" and profile.name != "llamacpp":
        raise ConfigError(source, "server.launcher", "xllamacpp is a launcher of the llamacpp profile")
    if cfg.launcher == VLLM_CPU and profile.name != "vllm":
        raise ConfigError(source, "server.launcher", f"{VLLM_CPU} is a launcher of the vllm profile")
    _check_standby(cfg, profile, source)
    if profile.name == "sim" and not cfg.launcher:
        # Read here, not first by each simulator life: a misspelt scenario otherwise failed every
        # start, restart after restart with backoff, minutes into a run that had already begun.
        from wedgewatch.sim.scenario import load_scenario

        try:
            load_scenario(cfg.scenario)
        except ConfigError as exc:
            raise ConfigError(source, "server.scenario", str(exc)) from None
    return profile


SLEEPERS = ("vllm", "sim")
"""Profiles whose server has vLLM's sleep mode (the simulator's is sim/sleep.py)."""


def _check_standby(cfg: ServerConfig, profile: Profile, source: str) -> None:
    """A spare life (standby.py) is a second process of ours on its own port; sleep is vLLM's on
    a GPU, and opens its dev routes."""
    why = ""
    if cfg.standby and not profile.owned:
        why = f"a spare life is one wedgewatch starts; profile {profile.name} is not"
    elif cfg.standby and cfg.port:
        why = f"two lives cannot share server.port {cfg.port}: set port = 0"
    if why:
        raise ConfigError(source, "server.standby", why)
    if not cfg.standby_sleep:
        return
    if not cfg.standby:
        why = "sleeps the spare life: set server.standby = 1"
    elif cfg.launcher == VLLM_CPU:
        why = "vLLM's CPU build refuses sleep mode (CUDA, ROCm and XPU only)"
    elif profile.name not in SLEEPERS:
        why = f"profile {profile.name} has no sleep mode (vllm has)"
    elif cfg.host not in ("127.0.0.1", "localhost", "::1"):
        why = f"opens vLLM's dev routes: server.host must be loopback, not {cfg.host}"
    if why:
        raise ConfigError(source, "server.standby_sleep", why)


def launch_argv(cfg: ServerConfig, profile: Profile, host: str, port: int) -> Argv:
    """The full argv of one server life."""
    if profile.build is None:
        return []
    argv = profile.build(cfg, host, port)
    for name in cfg.arg_sets:
        argv += profile.arg_sets[name]
    if cfg.lora_modules and profile.lora is not None:
        argv += profile.lora(cfg.lora_modules)
    return argv + list(cfg.args)


def series(cfg: ServerConfig, profile: Profile) -> Series:
    return Series(
        tuple(cfg.token_counters) or profile.token_counters,
        cfg.running_gauge or profile.running_gauge,
        cfg.waiting_gauge or profile.waiting_gauge,
        tuple(cfg.heartbeat_series) or profile.heartbeat,
        profile.preemptions,
    )


def heartbeat_rule(cfg: ServerConfig, series: Series) -> bool:
    """Whether this server is watched by the heartbeat rule (docs/supervisor.md, "Detection").
    ``auto``: when it has heartbeat series and the config does not set ``wedge_window`` (a
    config written for the tokens rule keeps it)."""
    if cfg.detection == "auto":
        return bool(series.heartbeat) and "wedge_window" not in cfg.model_fields_set
    return cfg.detection == "heartbeat" and bool(series.heartbeat)


def concurrency_limit(argv: list[str], profile: Profile) -> int | None:
    """The server's concurrency limit if the argv sets it (``--flag N`` or ``--flag=N``)."""
    found: int | None = None
    for i, arg in enumerate(argv):
        for flag in profile.concurrency_flags:
            value: str | None = None
            if arg == flag and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
            if value is not None and value.lstrip("-").isdigit() and int(value) > 0:
                found = int(value)  # the last one wins, as in argparse
    return found


# Profiles whose server refuses a request for a model it does not serve (vLLM and SGLang answer
# 404; llama-server and unknown servers take any name, so nothing is checked for them).
NAME_ROUTED = ("sim", "vllm", "sglang")


def check_requested_model(cfg: ServerConfig, requested: str | None, source: str = "config") -> None:
    """``agent.model`` must name the served model or one of ``lora_modules`` on a server that
    routes by name: a typo would otherwise cost every attempt an HTTP 404 (infra_failed)."""
    if requested is None or cfg.profile not in NAME_ROUTED:
        return
    known = {served_name(cfg), *cfg.lora_modules}
    if not cfg.served_model_name:
        known.add(cfg.model)
    if requested not in known:
        raise ConfigError(
            source,
            "agent.model",
            f"{requested!r} is neither the served model ({served_name(cfg)!r}) nor an adapter in "
            f"server.lora_modules ({', '.join(sorted(cfg.lora_modules)) or 'none'})",
        )


def model_names(cfg: ServerConfig) -> set[str]:
    """Names under which /v1/models may list the served model."""
    names = {served_name(cfg), cfg.model}
    if "/" in cfg.model or cfg.model.endswith(".gguf"):
        names.add(Path(cfg.model).name)
    return names
