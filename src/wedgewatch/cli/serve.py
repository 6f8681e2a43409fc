"""``wedgewatch serve CONFIG.toml``: a supervised server (or a pool, ``[[servers]]``) with the
watchdog proxy in front.

Runs until Ctrl-C or SIGTERM. The first stdout line is ``listening on URL`` (the proxy's);
every server life, wedge, restart and request goes to the ledger (``[run] ledger``). Beside the
proxy it answers ``GET /wedgewatch/servers`` and, when the environment variable named by
``--restart-token-env`` holds a token, ``POST /wedgewatch/restart`` with that bearer token: how a
pool on another host restarts this one (``server.restart_url``, docs/scale-out.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.cli._app import ViewOption, app, serve_forever, start_view, view_line
from wedgewatch.config import Config, effective, load_config

log = logging.getLogger(__name__)


@app.command("serve")
def serve(
    config: Annotated[
        Path, typer.Argument(help="Config TOML; its [server] and [watchdog] sections are used.")
    ],
    port: Annotated[int, typer.Option(help="The proxy's port; 0 picks a free one.", min=0, max=65535)] = 8100,
    host: Annotated[
        str,
        typer.Option(
            help="The proxy's address; beyond loopback only with --api-key (or WEDGEWATCH_API_KEY)."
        ),
    ] = "127.0.0.1",
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="WEDGEWATCH_API_KEY",
            show_envvar=True,
            help="Key every route but /health wants (Authorization: Bearer KEY, or x-api-key); needed "
            "to bind beyond loopback. Also read from WEDGEWATCH_API_KEY. Taken off before a request "
            "goes upstream; the server's own --api-key is sent in its place (docs/proxy.md).",
        ),
    ] = None,
    ledger: Annotated[
        str | None,
        typer.Option(help="Ledger: a SQLite file or postgresql://... (default: the config's [run] ledger)."),
    ] = None,
    restart_token_env: Annotated[
        str,
        typer.Option(
            help="Environment variable holding the bearer token of POST /wedgewatch/restart; "
            "unset or empty: the route refuses every restart."
        ),
    ] = "WEDGEWATCH_RESTART_TOKEN",
    view: ViewOption = False,
) -> None:
    """Start the configured server (fresh, ready, warmed up), watch it for wedges and crashes,
    restart it when needed, and serve it through the watchdog proxy until interrupted."""
    from wedgewatch.stack import preflight
    from wedgewatch.supervisor import profiles
    from wedgewatch.wire import access

    access.require_key(host, api_key)
    cfg = load_config(config)
    for member in cfg.members():
        profiles.check(member, str(config))
    preflight.check(cfg, ledger, "--ledger" if ledger else "run.ledger")  # before any server starts
    token = os.environ.get(restart_token_env) or None
    code = serve_forever(_serve(cfg, host, port, ledger or cfg.run.ledger, token, api_key or None, view))
    if code:
        raise typer.Exit(code)


async def _serve(
    cfg: Config,
    host: str,
    port: int,
    ledger_path: str,
    token: str | None,
    api_key: str | None = None,
    view: bool = False,
) -> int:
    from wedgewatch.ledger import Ledger
    from wedgewatch.stack import recovery, session
    from wedgewatch.stack.servers import Stack

    ledger = Ledger(ledger_path)
    child = None
    recovery.recover(ledger)  # what a killed serve (or run, or wrap) left open, servers included
    eff = effective(cfg)  # run.time_scale and run.seed, as under `run`
    stack = Stack(
        eff.members(), eff.watchdog, ledger=ledger, admin=True, restart_token=token, api_key=api_key
    )
    # The signal handlers stay in place until the stack has stopped: a second Ctrl-C during the
    # stop must not cut it short and leave a server running.
    async with session.stopping() as stop:
        try:
            url = await stop.first(stack.start(host, port))  # a failed start raises its ServerError
            if url is None:
                return session.INTERRUPTED
            # Printed once the server is ready: whoever reads this line can send requests at once.
            typer.echo(f"listening on {url}")
            sys.stdout.flush()
            if view:
                child = await asyncio.to_thread(start_view, ledger_path)
                typer.echo(f"view on {child.url}", err=True)
            else:
                typer.echo(view_line(ledger_path), err=True)
            failed = await stop.first(stack.pool.wait_failed())
            if failed is not None and not stop.requested:
                typer.echo(f"wedgewatch: error: {failed}".replace("\n", " "), err=True)
                return 1
            return 0
        finally:
            await stack.stop()
            ledger.close()
            if child is not None:
                child.stop()
