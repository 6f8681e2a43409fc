"""The engines ``bench chaos`` runs the bundled suite on, each made as deterministic as it can be,
and the run config each gets (every wedgewatch setting at its default unless said here).

What holds where (docs/reliability.md):

- **simulator**: its ``swe`` policy is a pure function of the conversation and the seed; a reply
  continued on the next life by its text is the reply it would have sent.
- **vLLM on the CPU**: one sequence at a time (``--max-num-seqs 1``: no batch changes a request's
  arithmetic), prefix caching off (``hybrid-safe``: every prompt computed from scratch), float32,
  a fixed prefill chunk (``--max-num-batched-tokens 256``), a fixed OpenMP thread count bound to
  fixed cores, greedy decoding. A continuation from token ids computes the tokens already sent in
  one prefill where the first life decoded them one by one, so a near-tie can still flip: the
  checker measures that margin on the control. vLLM's batch-invariant mode installs GPU kernels
  and does not serve its CPU build.
- **llama.cpp** (in-process, xllamacpp): one slot (``--parallel 1``), no prompt cache (every
  prompt computed from scratch), a fixed thread count, greedy decoding.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

SIM, VLLM_CPU, LLAMACPP = "sim", "vllm-cpu", "llamacpp"


@dataclass(frozen=True)
class Engine:
    name: str
    counter: str
    """The series that moves with every generated token (the rig's progress)."""
    gauge: str
    """The series of requests running on the engine."""
    server: str
    """The ``[server]`` table's body, less ``log_dir`` and the scenario."""
    agent: str = 'name = "bash"\nstep_limit = 12'
    time_scale: float = 1.0
    instances: int = 20
    concurrency: int = 2
    env: dict[str, str] = field(default_factory=dict)
    scenario: str = ""
    """The simulator's scenario head (its policy and speed); its faults are the schedule's.
    Ten tokens a second, as a loaded GPU server streams to each of many agents, so a run lasts
    long enough for its faults (each costs seconds of detection and restart) to land in it."""


ENGINES: dict[str, Engine] = {
    SIM: Engine(
        SIM,
        "vllm:generation_tokens_total",
        "vllm:num_requests_running",
        'profile = "sim"\nargs = ["--policy", "swe", "--fault-log", "{fault_log}"]',
        concurrency=4,
        scenario="[policy]\nskill = 0.5\n[server]\ntokens_per_s = 10.0\n",
    ),
    VLLM_CPU: Engine(
        VLLM_CPU,
        "vllm:generation_tokens_total",
        "vllm:num_requests_running",
        'profile = "vllm"\nlauncher = "vllm-cpu"\nmodel = "gemma3-270m"\narg_sets = ["hybrid-safe"]\n'
        'args = ["--max-num-seqs", "1", "--dtype", "float32", "--max-num-batched-tokens", "256",'
        ' "--seed", "0"]\nstop_grace = 5.0\n'
        # The execute-model timeout is the engine-error fault: a Worker stopped this long.
        'env = { VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS = "6", VLLM_CPU_OMP_THREADS_BIND = "0-1" }\n'
        "[server.warmup]\ncount = 1\nmax_tokens = 4",
        agent='name = "bash"\nstep_limit = 4\nmax_tokens = 64',
    ),
    LLAMACPP: Engine(
        LLAMACPP,
        "llamacpp:n_decode_total",
        "llamacpp:requests_processing",
        'profile = "llamacpp"\nlauncher = "xllamacpp"\nmodel = "gemma3-270m"\n'
        'args = ["--threads", "2", "--parallel", "1", "--ctx-size", "8192", "--no-cache-prompt"]\n'
        "stop_grace = 5.0\n[server.warmup]\ncount = 1\nmax_tokens = 4",
        agent='name = "bash"\nstep_limit = 4\nmax_tokens = 64',
    ),
}


@dataclass(frozen=True)
class Shape:
    """What a run of a bench holds: how many instances, at what speed (tests shrink it)."""

    instances: int
    concurrency: int
    fast: bool = False
    """A short schedule for the tests: a test's heartbeat window and scrapes, not wedgewatch's
    defaults, and the simulator at 100 tokens a second."""
    steps: int | None = None
    """The agent's step limit, when not the engine's."""
    max_tokens: int | None = None
    """The agent's max_tokens per request, when not the engine's."""


def config(engine: Engine, shape: Shape, root: Path, ledger: Path, seed: int, scenario: Path | None) -> Path:
    """A run config for ``engine`` in ``root`` (logs, work directory), its ledger at ``ledger``;
    ``seed`` is the run's (the simulator's policy), ``scenario`` the simulator's armed faults."""
    server = engine.server.replace("{fault_log}", str(root / "faults.jsonl"))
    lines = ["[server]", server.split("[server.warmup]")[0].rstrip(), f'log_dir = "{root / "logs"}"']
    if scenario is not None:
        lines.append(f'scenario = "{scenario}"')
    if shape.fast:
        lines += ["scrape_interval = 0.2", "heartbeat_window = 2.0"]
    if "[server.warmup]" in server:
        lines.append("[server.warmup]" + server.split("[server.warmup]")[1])
    else:
        lines += ["[server.warmup]", "count = 1", "max_tokens = 8"]
    agent = engine.agent
    if shape.steps is not None:
        agent = re.sub(r"step_limit = \d+", f"step_limit = {shape.steps}", agent)
    if shape.max_tokens is not None:
        agent = re.sub(r"\nmax_tokens = \d+", "", agent) + f"\nmax_tokens = {shape.max_tokens}"
    lines += ["[agent]", agent]
    lines += ["[suite]", f'slice = "0:{shape.instances}"']
    lines += [
        "[run]",
        f"concurrency = {shape.concurrency}",
        f'ledger = "{ledger}"',
        f'workdir = "{root / "work"}"',
        f"time_scale = {engine.time_scale}",
        f"seed = {seed}",
    ]
    path = root / "run.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def describe(engine: Engine) -> str:
    """The engine's settings in a line (the report's header)."""
    return json.dumps(asdict(engine), sort_keys=True)
