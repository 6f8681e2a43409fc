"""llama.cpp's own HTTP server, embedded by xllamacpp, as a command: ``python -m wedgewatch.launchers.llamacpp``.

xllamacpp runs llama.cpp's server (the same endpoints and metrics as ``llama-server``) inside a
Python process but has no command line. This module is that command line. Its flags use
``llama-server``'s names, so one argv serves both (``--metrics`` is accepted and always on).

It prints ``listening on http://HOST:PORT`` on stdout once ``/health`` answers 200, logs to
stderr, and exits 0 at once on SIGTERM or SIGINT. A missing or non-GGUF model, or a port in use,
exits 2 with one line naming the flag.

Why the exit skips llama.cpp's own stop: destroying the server waits for every open stream to
notice, which takes up to ``--sse-ping-interval`` (30 s by default), and holds the interpreter
meanwhile. Nothing is lost by exiting at once (there is no state to save), and a client mid-stream
sees its connection cut either way.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Any

from wedgewatch.base.errors import BadInput
from wedgewatch.launchers import models

log = logging.getLogger(__name__)

MODULE = "wedgewatch.launchers.llamacpp"

DEFAULT_CTX_SIZE = 8192
"""Tokens of KV cache, shared by all slots (unified KV): room for a SWE-bench prompt plus a few
turns of a coding agent, about 150 MB for the bundled model."""
DEFAULT_PARALLEL = 4
"""Slots: the story's four requests at a time."""
DEFAULT_BATCH = 64
"""Prompt tokens per llama_decode call (llama.cpp's default is 2,048). Each call is one beat of
``llamacpp:n_decode_total``, the heartbeat the supervisor watches, so a batch must take well under
the 8 s heartbeat window: on this shared 2-vCPU machine a 2,048-token batch took 14-20 s, a
256-token one about 3 s at a load average of 5 but 9 s at one above 17 (docs/supervisor.md)."""
DEFAULT_THREADS = 2
"""Plenty for a 270M model; on a bigger machine raise it for a bigger model."""
DEFAULT_POLL = 0
"""Idle threads sleep instead of spinning (llama.cpp's default is 50). On a shared CPU a spinning
thread waits on a descheduled sibling: median 37 tokens/s here (as low as 6) against 65 with 0."""
DEFAULT_SSE_PING_INTERVAL = 30
"""llama.cpp's own default: a `: ping` comment after this many seconds of silence on a stream."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description="Serve a GGUF model with llama.cpp's HTTP server (via xllamacpp).",
    )
    p.add_argument("-m", "--model", help="GGUF file (default: the bundled Gemma 3 270M)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default: %(default)s)")
    p.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default: 0)")
    p.add_argument("-c", "--ctx-size", type=int, default=DEFAULT_CTX_SIZE, help="KV cache tokens")
    p.add_argument("-np", "--parallel", type=int, default=DEFAULT_PARALLEL, help="slots")
    p.add_argument(
        "-b", "--batch-size", type=int, default=DEFAULT_BATCH, help="prompt tokens per decode call"
    )
    p.add_argument("-t", "--threads", type=int, default=DEFAULT_THREADS, help="CPU threads")
    p.add_argument(
        "--poll",
        type=int,
        default=DEFAULT_POLL,
        help="0-100: how hard idle threads spin waiting for work (default 0; llama.cpp's is 50)",
    )
    p.add_argument("-a", "--alias", help="served model name (default: gemma3-270m or the file stem)")
    p.add_argument(
        "--chat-template-file",
        help="Jinja chat template (default: Gemma turns for the bundled model, the model's own otherwise)",
    )
    p.add_argument(
        "--sse-ping-interval",
        type=int,
        default=DEFAULT_SSE_PING_INTERVAL,
        help="seconds of stream silence before a `: ping` comment; -1 disables",
    )
    p.add_argument(
        "--kv-unified",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one KV pool shared by all slots, so one long request can use it all",
    )
    p.add_argument(
        "--cache-prompt",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reuse a slot's KV cache for the prompt's common prefix (llama.cpp's default); "
        "--no-cache-prompt computes every prompt whole, so a reply does not depend on the slot's last request",
    )
    p.add_argument("--metrics", action="store_true", help="accepted for llama-server parity; always on")
    return p


def check_model(path: Path) -> None:
    """Raise BadInput naming ``--model`` unless ``path`` is a readable GGUF file."""
    if not path.is_file():
        raise BadInput(f"--model: no such file: {path}")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise BadInput(f"--model: cannot read {path}: {exc.strerror}") from exc
    if magic != b"GGUF":
        raise BadInput(f"--model: not a GGUF file: {path}")


def check_port(host: str, port: int) -> None:
    """Raise BadInput naming ``--port`` if ``host:port`` cannot be bound (llama.cpp would only say
    'failed to init server')."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise BadInput(f"--port: {host}:{port} is already in use") from exc
            raise BadInput(f"--host/--port: cannot bind {host}:{port}: {exc.strerror}") from exc


def resolve(args: argparse.Namespace) -> tuple[Path, str, Path | None]:
    """The model file, its served name, and the chat template file (None: the model's own)."""
    template = Path(args.chat_template_file) if args.chat_template_file else None
    if template is not None and not template.is_file():
        raise BadInput(f"--chat-template-file: no such file: {template}")
    if args.model is None:
        model = models.bundled_model_path()
        return model, args.alias or models.BUNDLED_MODEL, template or models.bundled_chat_template_path()
    model = Path(args.model).expanduser()
    check_model(model)
    return model, args.alias or model.stem, template


def make_params(args: argparse.Namespace, model: Path, alias: str, template: Path | None) -> Any:
    import xllamacpp

    for flag, value in (
        ("--ctx-size", args.ctx_size),
        ("--parallel", args.parallel),
        ("--batch-size", args.batch_size),
    ):
        if value < 1:
            raise BadInput(f"{flag}: must be at least 1, got {value}")
    if args.threads < 1:
        raise BadInput(f"--threads: must be at least 1, got {args.threads}")
    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    params.n_batch = args.batch_size
    params.n_ubatch = min(params.n_ubatch, args.batch_size)
    params.kv_unified = args.kv_unified
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.cpuparams.poll = args.poll
    params.cpuparams_batch.poll = args.poll
    params.model_alias = {alias}
    params.endpoint_metrics = True
    params.sse_ping_interval = args.sse_ping_interval
    params.use_jinja = True
    params.cache_prompt = args.cache_prompt
    if template is not None:
        params.chat_template = template.read_text()
    return params


class _Life:
    """Owns the xllamacpp Server on its own thread, so the main thread stays free for signals
    while the model loads. The Server is never destroyed: the process exits around it."""

    def __init__(self, params: Any) -> None:
        self._params = params
        self.ready = threading.Event()
        self._hold = threading.Event()
        self.address: str | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="llamacpp", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        import xllamacpp

        try:
            server = xllamacpp.Server(self._params)
        except Exception as exc:
            self.error = exc
            self.ready.set()
            return
        self.address = str(server.listening_address)
        self.ready.set()
        self._hold.wait()  # keeps `server` referenced until the process exits


def _wait_health(url: str, deadline: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url}/health did not answer 200")
        time.sleep(0.05)


def serve(args: argparse.Namespace) -> int:
    model, alias, template = resolve(args)
    check_port(args.host, args.port)
    params = make_params(args, model, alias, template)
    stop_signal: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop_signal.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)  # a closed terminal stops it, as SIGTERM does

    log.info(
        "loading %s as %r (ctx %d, %d slots, %d threads)",
        model,
        alias,
        args.ctx_size,
        args.parallel,
        args.threads,
    )
    started = time.monotonic()
    life = _Life(params)
    life.start()
    while not life.ready.wait(0.1):
        if stop_signal:
            log.info("signal %d while loading: exiting", stop_signal[0])
            return 0
    if life.error is not None or life.address is None:
        log.error("llama.cpp failed to start: %s", life.error)
        sys.stderr.write(f"{MODULE}: error: llama.cpp failed to start {model} (see log above)\n")
        return 1
    _wait_health(life.address, time.monotonic() + 30)
    log.info("ready in %.2fs at %s", time.monotonic() - started, life.address)
    sys.stdout.write(f"listening on {life.address}\n")
    sys.stdout.flush()

    while not stop_signal:
        time.sleep(0.2)
    log.info("signal %d: exiting", stop_signal[0])
    return 0


def launch_argv(
    *,
    model: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    ctx_size: int | None = None,
    parallel: int | None = None,
    threads: int | None = None,
    alias: str | None = None,
    sse_ping_interval: int | None = None,
    extra: list[str] | None = None,
) -> list[str]:
    """The argv that starts this launcher (for the supervisor's llamacpp profile and tests)."""
    argv = [sys.executable, "-m", MODULE, "--host", host, "--port", str(port)]
    for flag, value in (
        ("--model", model),
        ("--ctx-size", ctx_size),
        ("--parallel", parallel),
        ("--threads", threads),
        ("--alias", alias),
        ("--sse-ping-interval", sse_ping_interval),
    ):
        if value is not None:
            argv += [flag, str(value)]
    return argv + list(extra or [])


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=os.environ.get("WEDGEWATCH_LOG", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    args = build_parser().parse_args(argv)
    try:
        code = serve(args)
    except BadInput as exc:
        sys.stderr.write(f"{MODULE}: error: {exc}\n")
        return exc.exit_code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # see the module docstring: llama.cpp's own stop is skipped on purpose


if __name__ == "__main__":
    sys.exit(main())
