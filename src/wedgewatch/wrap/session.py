"""``wrap``: the configured server behind the proxy (a ``Stack``), an unmodified harness pointed at
it, and one harness run in the ledger from the command's start to its exit code.

Order: the stack is up (ready, warmed) before the harness starts; the harness's whole process
group has ended before the stack stops; the end row is written last. Ctrl-C, SIGTERM or SIGHUP to wrap
is passed to the harness as SIGINT (its own Ctrl-C handling runs), then SIGTERM and SIGKILL
after ``grace`` seconds each.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from wedgewatch import __version__
from wedgewatch.base import redact
from wedgewatch.base.errors import ServerError
from wedgewatch.base.processes import Identity
from wedgewatch.base.vocab import EXITED, INTERRUPTED, START_FAILED
from wedgewatch.config import Config, effective
from wedgewatch.ledger import Ledger
from wedgewatch.sandbox import reaper
from wedgewatch.stack import session
from wedgewatch.stack.servers import Stack
from wedgewatch.wrap import command, lines

log = logging.getLogger(__name__)

INTERRUPTED_EXIT = session.INTERRUPTED  # the exit code; INTERRUPTED is the word the row keeps


@dataclass
class WrapOptions:
    argv: Sequence[str]
    host: str = "127.0.0.1"
    port: int = 0
    rerun: list[str] | None = None  # the --rerun file's lines, for {rerun}
    env_prefixes: Sequence[str] = ()
    tag: str | None = None  # every request of this harness under /a/<tag>/
    grace: float = 10.0
    harness_run_id: str = field(default_factory=lambda: new_id())
    view_line: str = ""
    """A line printed after the harness run's own (``--view``'s address, or how to start a view)."""


def new_id() -> str:
    return time.strftime("wrap-%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def _record_start(ledger: Ledger, cfg: Config, opts: WrapOptions, argv: list[str], base_url: str) -> None:
    ledger.append(
        "harness_runs",
        {
            "harness_run_id": opts.harness_run_id,
            "started_at": time.time(),
            "argv_json": redact.argv(argv),
            "cwd": os.getcwd(),
            "base_url": base_url,
            "config_json": cfg.snapshot(),
            "config_hash": cfg.hash(),
            "tool_version": __version__,
            **Identity.me().columns(),  # who must end it: a killed wrap's run is ended by the next process
        },
    )


def _record_end(ledger: Ledger, opts: WrapOptions, code: int | None, reason: str) -> None:
    ledger.append(
        "harness_run_ends",
        {
            "harness_run_id": opts.harness_run_id,
            "ended_at": time.time(),
            "exit_code": code,
            "end_reason": reason,
        },
    )


async def wrap(cfg: Config, ledger: Ledger, opts: WrapOptions) -> int:
    """Run the harness under the stack; return its exit code (130 when interrupted first)."""
    eff = effective(cfg)  # run.time_scale and run.seed, as under `run`; the row keeps cfg as written
    stack = Stack(eff.members(), eff.watchdog, ledger=ledger, run_id=opts.harness_run_id)
    stack.bus.subscribe(lines.LifeLines().on_event)  # a line when a new life is ready after a restart
    proc: asyncio.subprocess.Process | None = None
    started_row = False
    code: int | None = None
    reason = INTERRUPTED
    async with session.stopping() as stop:
        try:
            # The proxy's URL is known before any server starts: the harness run's row comes
            # first, so every life of the run names a run that has its row, even when wrap is
            # killed during the first warm-up (without a watchdog, the server's URL comes later).
            early = await stack.start_proxy(opts.host, opts.port)
            if early:
                base_url = (f"{early}/a/{opts.tag}" if opts.tag else early) + "/v1"
                argv = command.substitute(opts.argv, base_url, opts.rerun)
                _record_start(ledger, cfg, opts, argv, base_url)
                started_row = True
            try:
                url = await stop.first(stack.start(opts.host, opts.port))
            except ServerError:
                reason = START_FAILED  # the harness never ran: its row says why
                raise
            if url is None:
                return INTERRUPTED_EXIT
            base_url = (f"{url}/a/{opts.tag}" if opts.tag else url) + "/v1"
            argv = command.substitute(opts.argv, base_url, opts.rerun)
            env = command.environment(url, os.environ, opts.env_prefixes, opts.tag)
            if not started_row:
                _record_start(ledger, cfg, opts, argv, base_url)
                started_row = True
            # stderr, so a harness's own stdout (its results, if it prints them) stays its own.
            print(f"wedgewatch wrap: harness run {opts.harness_run_id}, base URL {base_url}", file=sys.stderr)
            if opts.view_line:
                print(opts.view_line, file=sys.stderr)
            try:
                # Its own session: a terminal's Ctrl-C reaches wrap alone, which passes it on, and
                # the whole group can be ended at once.
                proc = await asyncio.create_subprocess_exec(*argv, env=env, start_new_session=True)
                reaper.shared().listed(proc.pid)  # its group dies with wrap, even by SIGKILL
            except OSError as exc:
                code, reason = 127, f"not started: {exc.strerror or exc}"
                return code
            status = await stop.first(proc.wait())
            if status is not None:
                code, reason = command.exit_code(status), EXITED
            await command.end_group(proc, opts.grace)  # stragglers after an exit, or the whole group
            if code is None:
                code = command.exit_code(proc.returncode) if proc.returncode is not None else None
            return INTERRUPTED_EXIT if reason == INTERRUPTED else (code if code is not None else 1)
        finally:
            if proc is not None and proc.returncode is None:
                await asyncio.shield(command.end_group(proc, opts.grace))
            if proc is not None:
                reaper.shared().released(proc.pid)
            await stack.stop()
            if started_row:
                _record_end(ledger, opts, code, reason)
                last = lines.end_line(ledger, opts.harness_run_id)  # the proxy's rows are all in now
                if last is not None:
                    print(last, file=sys.stderr, flush=True)
