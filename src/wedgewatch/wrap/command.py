"""The wrapped harness's command: its environment, its ``{placeholders}``, and its process group.

Base-URL variables set for the harness (each points at the proxy's ``/v1``):

- ``OPENAI_BASE_URL``: the OpenAI Python SDK, and Inspect AI's ``openai/`` provider;
- ``OPENAI_API_BASE``: LiteLLM's ``openai/`` provider (and so mini-swe-agent), older LangChain;
- ``HOSTED_VLLM_API_BASE``: LiteLLM's ``hosted_vllm/`` provider;
- ``VLLM_BASE_URL``: Inspect AI's ``vllm/`` provider pointed at a running server;
- ``WEDGEWATCH_BASE_URL``: anything of the user's own (``WEDGEWATCH_PROXY_URL`` is the root).

Inspect's ``openai-api/<service>/<model>`` (chat completions; its ``openai/`` provider calls the
Responses API, which vLLM-likes may not serve) reads ``<SERVICE>_BASE_URL`` and
``<SERVICE>_API_KEY``: both are set for ``WEDGEWATCH`` and for each ``--env-prefix SERVICE``. ``OPENAI_API_KEY`` is set to a placeholder only when unset (the SDK refuses
to start without one); a key the user set is passed on and recorded nowhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping, Sequence

from wedgewatch.base.errors import BadInput
from wedgewatch.supervisor.process import group_alive

log = logging.getLogger(__name__)

BASE_URL_VARS = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "HOSTED_VLLM_API_BASE", "VLLM_BASE_URL")
PLACEHOLDER_KEY = "wedgewatch"


def environment(
    proxy_url: str, base: Mapping[str, str], prefixes: Sequence[str] = (), tag: str | None = None
) -> dict[str, str]:
    """The harness's environment: ``base`` plus the base-URL variables (``proxy_url`` is the
    proxy's root; ``tag`` puts every request under ``/a/<tag>/``)."""
    root = f"{proxy_url}/a/{tag}" if tag else proxy_url
    v1 = root + "/v1"
    env = dict(base)
    for name in BASE_URL_VARS:
        env[name] = v1
    env.setdefault("OPENAI_API_KEY", PLACEHOLDER_KEY)
    for prefix in (*prefixes, "WEDGEWATCH"):
        env[f"{prefix.upper()}_BASE_URL"] = v1
        # Inspect's openai-api/<prefix>/<model> wants <PREFIX>_API_KEY as well: the user's own
        # if set, else the OpenAI key wrap passes on.
        env.setdefault(f"{prefix.upper()}_API_KEY", env["OPENAI_API_KEY"])
    env["WEDGEWATCH_PROXY_URL"] = proxy_url
    return env


def read_rerun(path: str) -> list[str]:
    """A ``--rerun-out`` file: one selection per line (a regex, or one id per line)."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [line.strip() for line in fh]
    except OSError as exc:
        raise BadInput(f"--rerun: cannot read {path}: {exc.strerror}") from None
    return [line for line in lines if line]


def substitute(argv: Sequence[str], base_url: str, rerun: Sequence[str] | None) -> list[str]:
    """``{base_url}`` anywhere in an argument; ``{rerun}`` as a whole argument expands to the
    rerun file's lines (one argument each), inside an argument to them joined by commas.
    Plain ``str.replace``: a harness's own braces (JSON, regexes) are left alone."""
    out: list[str] = []
    for arg in argv:
        arg = arg.replace("{base_url}", base_url)
        if "{rerun}" in arg:
            if rerun is None:
                raise BadInput("CMD: {rerun} is used but no --rerun FILE was given")
            if arg == "{rerun}":
                out.extend(rerun)
                continue
            arg = arg.replace("{rerun}", ",".join(rerun))
        out.append(arg)
    return out


def exit_code(returncode: int) -> int:
    """A shell's convention: a process killed by signal N exits 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def end_group(proc: asyncio.subprocess.Process, grace: float) -> None:
    """Stop the harness's whole process group: SIGINT (what Ctrl-C would have sent it), then
    SIGTERM, then SIGKILL, ``grace`` seconds apart; returns once no process of it is left.
    Also called after a normal exit: a harness's stray children must not outlive the wrap."""
    pgid = proc.pid
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if proc.returncode is None or group_alive(pgid):
            _signal_group(pgid, sig)
        else:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace if sig != signal.SIGKILL else 5.0):
                await proc.wait()
                while group_alive(pgid):
                    await asyncio.sleep(0.05)
    if group_alive(pgid):
        log.error("process group %d of the harness survived SIGKILL", pgid)
