"""The sections of a run besides its servers: ``[watchdog]``, ``[agent]``, ``[suite]``,
``[sandbox]`` and ``[run]``, each knob with its default and why.

Defaults come from the story in README.md (a hung server scored as a weak model): client retries 0,
3 attempts per instance, 4 at a time, a 240 s total deadline, two warm-ups, a fresh server per run.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from wedgewatch.config.ray import RayConfig
from wedgewatch.config.section import Section as _Section


class WatchdogConfig(_Section):
    """The proxy's deadlines. Each is documented with its reason in docs/proxy.md."""

    enabled: bool = True
    """Put the watchdog proxy between the agents and the server. False sends agents straight to
    the server, unwatched and unrecorded. (To replay a harness without a watchdog but keep its
    requests in the ledger, as the demo's naive arms do, leave it on with every deadline out of
    reach.)"""
    record_only: bool = False
    """The proxy only records: one ledger row per request (how long it waited, the model it named)
    and never ends one, no deadline and no engine-stop verdict. For replaying a harness that had
    no watchdog while keeping its requests in the ledger (the demo's naive arms)."""
    ttft_timeout: float = Field(60.0, gt=0)
    """Seconds to the first token before `stall_ttft`. Covers a long prefill plus queueing behind
    busy slots; vLLM liveness proposals use 60 s."""
    stall_timeout: float = Field(20.0, gt=0)
    """Seconds without a token, once tokens have begun, before `stall_midstream`. A healthy decode
    step takes milliseconds; SGLang's health canary uses 20 s."""
    min_rate: float = Field(0.5, ge=0)
    """Tokens per second below which a stream is a `trickle` (measured over `rate_window`); 0 turns
    the check off."""
    rate_window: float = Field(60.0, gt=0)
    """Seconds over which `min_rate` is measured: a sliding window, which starts at the first token
    until that token is `rate_window` old (so a stream that trickles from its start is caught
    `rate_window` after its first token)."""
    total_timeout: float = Field(240.0, gt=0)
    """Seconds for the whole request before `total_timeout`: the story's client deadline (a normal
    generation took about 90 s)."""
    deadlines: Literal["auto", "engine", "wall"] = "auto"
    """How `ttft_timeout`-like deadlines count time. `engine`: only engine-stepping time in which
    the request made no progress and was not waiting or preempted (`engine_ttft_timeout`,
    `engine_stall_timeout`), judged from the server's heartbeat; `wall`: wall-clock time
    (`ttft_timeout`, `stall_timeout`). `auto`: engine when a heartbeat reaches the proxy (the
    supervisor's, or `--metrics-url`) and neither `ttft_timeout` nor `stall_timeout` is set."""
    engine_ttft_timeout: float = Field(120.0, gt=0)
    """Engine seconds (see `deadlines`) to the first token before `stall_ttft`. Twice the 60 s
    prefill of a 100k-token SWE-bench prompt: a prefill is time the engine spends on this
    request; queueing and preemption never count, and a wedge of the whole engine is found by the
    heartbeat within `server.heartbeat_window`, not by this."""
    engine_stall_timeout: float = Field(10.0, gt=0)
    """Engine seconds without a token, once tokens have begun, before `stall_midstream`. A
    running request gets a token on every decode step (milliseconds to a second); ten seconds
    of the engine stepping for others while this one gets nothing is one stuck request."""
    body_timeout: float = Field(60.0, gt=0)
    """Seconds for the client to send its whole request body. Past it the request ends
    `client_slow_body` (HTTP 408), the client's outcome: the upstream never had the request. The
    request's own deadlines start only once the body is in, so a slow client never spends them."""
    max_frame_bytes: int = Field(16 * 1024**2, ge=1024)
    """Bytes of one SSE line or event the proxy holds while it waits for its end. A token chunk is
    hundreds of bytes and a whole answer sent as one chunk a few hundred kilobytes; past the cap the
    request ends `reply_too_large` and the buffer is given back, so one endless line from a broken
    server cannot take the proxy's memory."""
    max_body_bytes: int = Field(64 * 1024**2, ge=1024)
    """Bytes of a whole upstream body the proxy reads at once (a server that answered a stream
    request with one JSON body, or an error body). Past it: `reply_too_large`."""
    passthrough_timeout: float = Field(10.0, gt=0)
    """Deadline for the reads (GET, HEAD) the proxy passes through: /v1/models, /health, /metrics.
    Other requests it does not watch (/tokenize, /v1/embeddings, ...) get total_timeout."""
    on_wedge: Literal["resume", "fail"] = "resume"
    """What becomes of the requests in flight on a server life the supervisor replaces (a wedge,
    a crash, the heartbeat's verdict). `resume`: each is held and sent again to the next ready
    life, whole when the client has received nothing of it, else continued from the text already
    relayed (docs/proxy.md, "Resume"); a request that cannot be continued exactly fails as with
    `fail`, its row saying why. `fail`: each fails at once with a non-retryable error. A stall of
    one request while its server serves others is that request's failure either way."""
    max_resumes: int = Field(1, ge=0)
    """Times one request is resumed. A request that meets a second wedge after a resume fails and
    is named a suspect in its row: one that wedges every server it reaches is not retried for ever."""
    verdict_wait: float = Field(5.0, ge=0)
    """Seconds a request whose server broke under it (the connection cut, a stream ended without
    its finish, an error event, a 5xx) waits for the supervisor's verdict that the life is being
    replaced (a crash is seen within a scrape or two; an engine that died, by the canary the proxy
    asks for) before it fails as the server's error. Not waited when the server's /health answers
    200: the error is the request's own and goes to the client at once (docs/proxy.md)."""
    keepalive_interval: float = Field(5.0, ge=0)
    """Seconds between the SSE comment lines (`: wedgewatch: held for the next server life`) a
    begun stream gets while it is held for the next server life, so a client whose read timeout
    is shorter than a restart keeps its stream; every SSE parser ignores them. 0: none. A client
    that did not ask for a stream cannot be kept alive this way (docs/proxy.md)."""
    restart_wait: float = Field(900.0, ge=0)
    """Seconds a request that arrives while the supervisor replaces a server life (or before the
    first one is ready) waits for the next ready life before it fails with `connection`. Longer
    than a real restart (`startup_timeout`'s 600 s plus warm-up); 0 fails such requests at once.
    Requests in flight on the life being replaced are not rescued: they fail as they did."""
    tag_header: str = "x-wedgewatch-tag"
    """Request header whose value tags a request with an instance (or attempt) when its path
    has no `/a/<tag>/`: harnesses that can add a header but not change their base URL."""
    fingerprints: bool = True
    """Store SHA-256 hashes of each request's messages (never their text) in its row, so `audit`
    can match untagged requests to instances by content."""


class AgentConfig(_Section):
    """The agent that attempts each instance."""

    name: str = "bash"
    """Agent from the registry: bash (built in), command, mini-swe-agent."""
    model: str | None = None
    """The name the agent puts in each request's `model`: a LoRA adapter's name from
    `server.lora_modules`, or any name the server answers to. Unset: the server's served name
    (`server.served_model_name`, else `server.model`)."""
    step_limit: int = Field(50, ge=1)
    """Model turns before `early_stop`/`step_limit`."""
    token_limit: int = Field(0, ge=0)
    """Total tokens (prompt + completion) before `early_stop`/`token_limit`; 0: no limit."""
    format_error_limit: int = Field(3, ge=1)
    """Replies without exactly one bash block before `early_stop`/`format_errors`."""
    command_timeout: float = Field(120.0, gt=0)
    """Seconds one agent command may run in the sandbox."""
    output_limit: int = Field(10_000, ge=100)
    """Characters of command output sent back to the model (the rest is cut, with a note)."""
    max_tokens: int = Field(4096, ge=1)
    """max_tokens of each model request."""
    temperature: float = Field(0.0, ge=0)
    """Sampling temperature of each model request."""
    client_timeout: float = Field(900.0, gt=0)
    """The bash agent's OpenAI-client timeout per request, in the server's seconds (run.time_scale
    divides it). Generous on purpose: the proxy's deadlines are the ones that should fire."""
    client_retries: int = Field(0, ge=0)
    """The bash agent's OpenAI-client retries per request. 0: retries belong to the task, in a fresh
    sandbox. The SDK's own default is 2 (the story's 1,802-second trap)."""
    command: list[str] = Field(default_factory=list)
    """argv template of the `command` agent: {instance_id} {workdir} {problem_file} {base_url}
    {model} {attempt_id} {patch_file} (docs/agents.md)."""
    miniswe_config: str = "mini"
    """mini-swe-agent config whose prompt templates the `mini-swe-agent` agent uses: a bundled
    name (`mini`, mini's own default with tool calls; `swebench`) or a YAML path."""
    timeout: float = Field(3600.0, gt=0)
    """Seconds a whole attempt may take. An agent still running past it (plus a short grace) is
    ended `harness_error`; mini-swe-agent checks it between steps and stops `early_stop`/
    `time_limit`, the command agent is killed (`harness_error`/`agent_timeout`); docs/agents.md."""


class SuiteConfig(_Section):
    """Which instances to run."""

    path: str | None = None
    """SWE-bench JSONL or JSON list; unset: the bundled suite."""
    dataset: str | None = None
    """A Hugging Face dataset name (needs `datasets` and network)."""
    split: str = "test"
    """Dataset split."""
    ids: list[str] = Field(default_factory=list)
    """Only these instance ids."""
    slice: str | None = None
    """A Python slice over the suite, for example `0:20`."""
    regex: str | None = None
    """Only ids matching this regular expression."""
    repos_dir: str | None = None
    """Directory of local mirrors, `<repo with / replaced by __>` per repository."""


class SandboxConfig(_Section):
    """Where an attempt's commands run (docs/sandboxes.md): which backend, and its limits."""

    kind: str = "local"
    """Backend from the registry: `local` (a directory, the same user: no isolation), `bwrap`
    (bubblewrap: host read-only, no network, own PID namespace, limits), `container` (one container
    per attempt from the instance's image, through `container_cli`)."""
    container_cli: str = "docker"
    """`docker` or `podman` (or a path to either): the CLI the `container` backend drives."""
    container_args: list[str] = Field(default_factory=list)
    """Extra arguments of `<cli> run` for hosts that need them, for example podman on a host where
    crun fails: `["--runtime", "runc"]`."""
    image: str | None = None
    """Image for every instance, in place of the instance's own (`image_name`, `docker_image`,
    `image`) or SWE-bench's name for it (`swebench/sweb.eval.x86_64.<id>:latest`)."""
    pull: bool = False
    """Pull an instance's image that is not in the engine's local storage (needs a registry); off:
    the attempt ends `harness_error` naming the image."""
    pull_timeout: float = Field(1800.0, gt=0)
    """Seconds a pull may take (SWE-bench images are gigabytes)."""
    workdir: str = "/testbed"
    """The repository's directory inside a container (SWE-bench images keep it at /testbed)."""
    network: bool = False
    """Let sandboxed commands reach the network (bwrap, container). Off: an agent's commands reach
    nothing, the agent's own LLM calls are made outside the sandbox and are unaffected."""
    cpu_seconds: int = Field(600, ge=1)
    """CPU seconds one command may use (RLIMIT_CPU; bwrap and container)."""
    memory_mb: int = Field(4096, ge=16)
    """Address space of each process in MiB (RLIMIT_AS; bwrap), memory of the container (container)."""
    file_size_mb: int = Field(1024, ge=1)
    """Largest file a command may write, in MiB (RLIMIT_FSIZE): a runaway write stops there."""
    processes: int = Field(256, ge=8)
    """Processes a sandbox may hold at once: a fork bomb stops there (bwrap: RLIMIT_NPROC of the
    sandbox's own uid; container: `--pids-limit`)."""
    open_files: int = Field(1024, ge=64)
    """Open files per process (RLIMIT_NOFILE)."""
    tmp_size_mb: int = Field(512, ge=1)
    """Size of the private /tmp in MiB (a tmpfs of the sandbox's own)."""
    disk_mb: int = Field(8192, ge=0)
    """Disk quota of a sandbox in MiB, whatever the number of files: bwrap (as root), the work
    tree, HOME and TMPDIR on a loop-mounted ext4 of this size (sparse: only what is written uses
    the host's disk); container, the repository directory (`workdir`) on a tmpfs of this size
    filled from the image (it counts against `memory_mb`). 0: no quota."""


class RunConfig(_Section):
    """How the run is driven."""

    concurrency: int = Field(4, ge=1)
    """Instances at a time (the story ran four)."""
    attempts: int = Field(3, ge=1)
    """Attempts per instance; only infrastructure failures use up more than one. Attempts the
    server ended (a restart, a recycle, a detected wedge) do not count: they are requeued, up to
    `max_requeues`. Raise it for a finished run with `wedgewatch run --resume RUN --attempts N`."""
    max_requeues: int = Field(20, ge=0)
    """Attempts of one instance the server may end (restart, recycle, detected wedge) before the
    instance is `infra_failed` anyway. Generous: only a server that keeps dying reaches it, and
    then the run should stop wasting time on it. 0: no requeue, every api_error uses up
    `attempts` (a harness without wedgewatch, as the demo's naive arms replay)."""
    ledger: str = "wedgewatch.sqlite"
    """The ledger: a SQLite file (the default), or a PostgreSQL database as
    `postgresql://user@host:port/db` (the `postgres` extra; several runners can then work on one
    run, `wedgewatch run --join RUN`)."""
    workdir: str = ".wedgewatch/work"
    """Where sandboxes and trajectories live."""
    keep_sandboxes: bool = False
    """Keep each attempt's sandbox for debugging."""
    evaluate: bool = True
    """Run the instance's tests on each submitted patch."""
    eval_timeout: float = Field(600.0, gt=0)
    """Seconds for one evaluation."""
    time_scale: float = Field(1.0, gt=0)
    """Divides simulated durations for fast simulated runs: the simulator's (when
    `server.time_scale` is left at 1), the proxy's deadlines and the supervisor's windows, under
    `run`, `serve` and `wrap` alike. Agent and evaluation deadlines stay real: sandbox commands
    run at real speed."""
    seed: int = 0
    """Seed for everything random in a simulated run (passed to the simulator as `--seed`)."""
    model_name: str | None = None
    """`model_name_or_path` in exports; defaults to the server's model."""
    executor: str = "local"
    """Where each attempt's agent and sandbox run: `local` (a thread of this process) or `ray` (a
    Ray task on any node, `[run.ray]`; the `ray` extra). The supervisor, the proxy and the
    ledger's writer stay in this process either way."""
    ray: RayConfig = Field(default_factory=RayConfig)
    """The Ray executor's cluster and per-attempt resources."""
    lease_interval: float = Field(5.0, gt=0)
    """Seconds between a runner's liveness rows (`runner_beats`) when several runners may share
    the run (a PostgreSQL ledger): how the run's other runners, on any host, know it is alive."""
    lease_timeout: float = Field(30.0, gt=0)
    """Seconds without a liveness row before the run's other runners (or a resume) take a runner
    for dead: its attempts in flight end `interrupted`/`runner_lost` and are attempted again.
    Several intervals (at least two), so one slow write is not taken for a death."""

    @field_validator("lease_timeout")
    @classmethod
    def _lease(cls, timeout: float, info: ValidationInfo) -> float:
        interval = info.data.get("lease_interval")
        if interval is not None and timeout < 2 * interval:
            raise PydanticCustomError("lease", f"must be at least twice run.lease_interval ({interval:g} s)")
        return timeout
