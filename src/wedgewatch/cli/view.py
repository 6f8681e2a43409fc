"""``wedgewatch view [LEDGER] [--run ID]``: a live page over the ledger (docs/view.md)."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli._app import app, open_ledger, serve_forever

if TYPE_CHECKING:
    from wedgewatch.ledger.store import Ledger


@app.command("view")
def view(
    ledger: Annotated[
        str | None,
        typer.Argument(help="The ledger: a SQLite file or postgresql://... (default: wedgewatch.sqlite)."),
    ] = None,
    run: Annotated[
        str | None, typer.Option("--run", help="Open on this run (or wrapped run); default: every run.")
    ] = None,
    port: Annotated[
        int, typer.Option(help="The page's port on 127.0.0.1; 0 picks a free one.", min=0, max=65535)
    ] = 0,
    open_browser: Annotated[bool, typer.Option("--open", help="Open the page in a browser.")] = False,
    proxy: Annotated[
        list[str] | None,
        typer.Option(
            "--proxy",
            help="A proxy's URL to read the progress of requests in flight from (GET /wedgewatch/status), "
            "besides those the ledger records.",
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", hidden=True, help="Wait for the ledger to be made.")
    ] = False,
    until_stdin_closes: Annotated[
        bool, typer.Option("--until-stdin-closes", hidden=True, help="Stop when stdin reaches its end.")
    ] = False,
) -> None:
    """Serve a live page of the ledger on 127.0.0.1 (read-only): each server's lives, wedges and
    restarts, the requests in flight, every instance's attempts, the honest score as it moves.
    The same for a finished run. The first line printed is `view on URL`."""
    try:
        import aiohttp_sse  # noqa: F401
        import jinja2  # noqa: F401
    except ModuleNotFoundError as exc:
        raise BadInput(
            f"view: this needs the 'view' extra ({exc.name} is not installed): pip install 'wedgewatch[view]'"
        ) from None
    for url in proxy or []:
        if not url.startswith(("http://", "https://")):
            raise BadInput(f"--proxy: {url!r} is not an http:// URL")
    from wedgewatch.config import RunConfig

    target = str(ledger) if ledger is not None else RunConfig().ledger
    # With --wait the page serves at once and opens the ledger when it exists (a command started
    # beside the view makes it); without, a ledger that is not there is the user's error, now.
    store: Ledger | Callable[[], Ledger] = (lambda: open_ledger(target)) if wait else open_ledger(target)
    try:
        serve_forever(_serve(store, target, run, port, open_browser, tuple(proxy or ()), until_stdin_closes))
    finally:
        if not callable(store):
            store.close()


async def _serve(
    store: Ledger | Callable[[], Ledger],
    target: str,
    run: str | None,
    port: int,
    open_browser: bool,
    proxies: tuple[str, ...],
    until_eof: bool,
) -> None:
    from aiohttp import web

    from wedgewatch.stack import session
    from wedgewatch.view.app import View

    view = View(store, target, run, proxies)
    runner = web.AppRunner(view.app(), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        bound = runner.addresses[0][1]
        url = f"http://127.0.0.1:{bound}/"
        typer.echo(f"view on {url}")
        sys.stdout.flush()
        if open_browser:
            import webbrowser

            webbrowser.open(url)
        async with session.stopping() as stop:
            if until_eof:
                loop = asyncio.get_running_loop()

                def drain() -> None:
                    while sys.stdin.read(4096):
                        pass
                    loop.call_soon_threadsafe(stop.event.set)

                threading.Thread(target=drain, daemon=True).start()
            await stop.event.wait()
    finally:
        await runner.cleanup()
        view.close()
        view.close()
