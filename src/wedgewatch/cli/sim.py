"""``wedgewatch sim``: the vLLM look-alike that wedges on purpose."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base import redact
from wedgewatch.base.errors import BadInput
from wedgewatch.cli._app import app

log = logging.getLogger(__name__)


def _lora(spec: str) -> tuple[str, str]:
    """vLLM's two forms: ``name=path`` or a JSON object with ``name`` and ``path``."""
    if spec.startswith("{"):
        try:
            obj = json.loads(spec)
            return str(obj["name"]), str(obj["path"])
        except (ValueError, KeyError, TypeError):
            raise BadInput(f"--lora-modules: bad JSON module {spec!r}") from None
    name, sep, path = spec.partition("=")
    if not sep or not name:
        raise BadInput(f"--lora-modules: expected name=path, got {spec!r}")
    return name, path


def _leftovers(args: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Split what click did not recognise into (positionals, lora specs, ignored vLLM flags).

    vLLM takes ``--lora-modules a=p b=q`` and ``--served-model-name a b`` (several values after one
    flag) and ``vllm serve MODEL``; click leaves the extra values here. An unknown ``--flag`` takes
    the next token as its value unless that token is itself a flag.
    """
    positionals, loras, ignored = [], [], []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            ignored.append(a)
            if "=" not in a and i + 1 < len(args) and not args[i + 1].startswith("-"):
                ignored.append(args[i + 1])
                i += 1
        elif "=" in a or a.startswith("{"):
            loras.append(a)
        else:
            positionals.append(a)
        i += 1
    return positionals, loras, ignored


@app.command(
    "sim",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def sim(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option(help="Address to bind; beyond loopback only with --api-key (or VLLM_API_KEY).")
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            help="Port; 0 picks a free one. The first stdout line is 'listening on http://HOST:PORT' "
            "(the address really bound).",
            min=0,
            max=65535,
        ),
    ] = 8000,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="VLLM_API_KEY",
            show_envvar=True,
            help="vLLM's --api-key: every route but /health wants 'Authorization: Bearer KEY' "
            "(or x-api-key); needed to bind beyond loopback. Also read from VLLM_API_KEY, as vLLM does.",
        ),
    ] = None,
    scenario: Annotated[
        str, typer.Option(help="A bundled scenario's name or a scenario TOML file.")
    ] = "healthy",
    time_scale: Annotated[
        float,
        typer.Option(
            help="Divide every duration (prefill, token interval, "
            "fault timings, unready period, ping interval) by X."
        ),
    ] = 1.0,
    max_num_seqs: Annotated[
        int | None,
        typer.Option(
            help="Concurrent generations; the rest wait. Default: the scenario's, else 256 (vLLM's default)."
        ),
    ] = None,
    model: Annotated[
        str, typer.Option(help="The base model's name (vLLM's positional MODEL works too).")
    ] = "sim-model",
    served_model_name: Annotated[
        list[str] | None, typer.Option(help="Name(s) the model is served as (default: --model).")
    ] = None,
    enable_prefix_caching: Annotated[
        bool,
        typer.Option(
            "--enable-prefix-caching/--no-enable-prefix-caching",
            help="Prefix caching (hits counted; raises the wedge hazard in the story scenarios).",
        ),
    ] = True,
    enforce_eager: Annotated[
        bool,
        typer.Option(help="Eager mode, no CUDA graphs (lowers the wedge hazard in the story scenarios)."),
    ] = False,
    enable_lora: Annotated[bool, typer.Option(help="Serve the --lora-modules adapters.")] = False,
    lora_modules: Annotated[
        list[str] | None,
        typer.Option(
            help="Adapter as name=path (or vLLM's JSON form); repeat, or list several after one flag."
        ),
    ] = None,
    max_model_len: Annotated[
        int, typer.Option(help="Context limit: longer prompt+max_tokens get vLLM's 400 error.")
    ] = 32768,
    sse_ping_interval: Annotated[
        float | None,
        typer.Option(help="Send ': ping' SSE comments every S seconds on open streams, stalls included."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the stochastic wedge and the filler text.")] = 0,
    policy: Annotated[
        str, typer.Option(help="Reply policy from the registry in sim/policy.py (filler, swe).")
    ] = "filler",
    preload_age: Annotated[
        int,
        typer.Option(
            help="Start as a used server that already served this "
            "many requests (counts toward the wedge hazard's age)."
        ),
    ] = 0,
    fault_log: Annotated[
        Path | None,
        typer.Option(help="Append one JSON line per request a fault or the wedge struck (the ground truth)."),
    ] = None,
    dialect: Annotated[
        str,
        typer.Option(
            help="Whose /metrics names and health endpoints: vllm, or sglang (SGLang's series, "
            "/health_generate, and its frozen scheduler's 503 after 20 s)."
        ),
    ] = "vllm",
    enable_sleep_mode: Annotated[
        bool,
        typer.Option(
            help="vLLM's sleep mode: POST /sleep and /wake_up, GET /is_sleeping (with VLLM_SERVER_DEV_MODE=1)."
        ),
    ] = False,
) -> None:
    """An OpenAI-compatible server shaped like vLLM that stalls, trickles, crashes and wedges on
    purpose, by a scripted or stochastic fault model (docs/simulator.md). Unknown vLLM flags are
    accepted and ignored."""
    from wedgewatch.sim.engine import SimOptions
    from wedgewatch.sim.server import serve

    positionals, extra_loras, ignored = _leftovers(list(ctx.args))
    names = list(served_model_name or [])
    if positionals and model == "sim-model":
        model = positionals.pop(0)
    names += positionals if names else []
    if positionals and not names:
        raise BadInput(f"sim: unexpected argument {positionals[0]!r}")
    if ignored:
        log.warning("sim: ignoring vLLM flags %s", " ".join(redact.argv(ignored)))
    loras = dict(_lora(s) for s in [*(lora_modules or []), *extra_loras])
    if preload_age < 0:
        raise BadInput("--preload-age: must be >= 0")

    def on_listening(url: str) -> None:
        typer.echo(f"listening on {url}")
        sys.stdout.flush()

    opts = SimOptions(
        host=host,
        port=port,
        scenario=scenario,
        time_scale=time_scale,
        max_num_seqs=max_num_seqs,
        model=model,
        served_model_names=names,
        prefix_caching=enable_prefix_caching,
        enforce_eager=enforce_eager,
        enable_lora=enable_lora,
        lora_modules=loras,
        sse_ping_interval=sse_ping_interval,
        seed=seed,
        policy=policy,
        max_model_len=max_model_len,
        preload_age=preload_age,
        fault_log=str(fault_log) if fault_log is not None else None,
        dialect=dialect,
        api_key=api_key or None,
        sleep_mode=enable_sleep_mode,
    )
    code = serve(opts, on_listening)
    if code:
        raise typer.Exit(code)
