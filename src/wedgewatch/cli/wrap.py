"""``wedgewatch wrap CONFIG -- CMD ARGS...``: run an unmodified harness against the configured
server, supervised and behind the watchdog proxy; exit with the harness's own exit code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli._app import ViewOption, app, check_line, serve_forever, start_view, view_line


@app.command("wrap")
def wrap(
    config: Annotated[
        Path, typer.Argument(help="Config TOML; its [server] and [watchdog] sections are used.")
    ],
    cmd: Annotated[
        list[str],
        typer.Argument(
            help="The harness command, after `--`. `{base_url}` becomes the proxy's /v1 URL; "
            "`{rerun}` the lines of the --rerun file.",
            show_default=False,
        ),
    ],
    ledger: Annotated[
        str | None,
        typer.Option(help="Ledger: a SQLite file or postgresql://... (default: the config's [run] ledger)."),
    ] = None,
    rerun: Annotated[
        Path | None, typer.Option(help="A file from `audit --rerun-out`: what `{rerun}` expands to.")
    ] = None,
    tag: Annotated[
        str | None,
        typer.Option(help="Tag every request of this harness (/a/<tag>/v1): one instance per run."),
    ] = None,
    env_prefix: Annotated[
        list[str] | None,
        typer.Option(help="Also set <PREFIX>_BASE_URL (Inspect's openai-api/<prefix>/... reads it)."),
    ] = None,
    port: Annotated[int, typer.Option(help="The proxy's port; 0 picks a free one.", min=0, max=65535)] = 0,
    grace: Annotated[
        float,
        typer.Option(help="Seconds between SIGINT, SIGTERM and SIGKILL when stopping the harness.", min=0),
    ] = 10.0,
    view: ViewOption = False,
) -> None:
    """Start the configured server (fresh, ready, warmed, watched, restarted) behind the proxy,
    run CMD with OPENAI_BASE_URL and the other base-URL variables pointing at it, stream its
    output, stop everything when it exits or on Ctrl-C, and exit with its code. The ledger
    records the harness run; `wedgewatch audit` reads its results against the request rows."""
    from wedgewatch.config import load_config
    from wedgewatch.ledger import Ledger
    from wedgewatch.stack import recovery
    from wedgewatch.supervisor import profiles
    from wedgewatch.wrap import command
    from wedgewatch.wrap.session import WrapOptions
    from wedgewatch.wrap.session import wrap as run_wrapped

    if not cmd:
        raise BadInput("wrap: no command given: wedgewatch wrap CONFIG -- CMD ARGS...")
    if tag is not None and not tag.replace(".", "").replace("_", "").replace("-", "").isalnum():
        raise BadInput(f"--tag: {tag!r} must be letters, digits, '.', '_' or '-'")
    from wedgewatch.stack import preflight

    cfg = load_config(config)
    for member in cfg.members():
        profiles.check(member, str(config))
    preflight.check(cfg, ledger, "--ledger" if ledger else "run.ledger")  # before any server starts
    lines = command.read_rerun(str(rerun)) if rerun is not None else None
    opts = WrapOptions(argv=cmd, port=port, rerun=lines, env_prefixes=env_prefix or (), tag=tag, grace=grace)
    store = Ledger(ledger or cfg.run.ledger)
    child = None
    try:
        recovery.recover(store)  # what a killed wrap (or serve, or run) left open, servers included
        # Printed once the harness has started (wrap/session.py), so a refused wrap prints one line.
        if view:
            child = start_view(ledger or cfg.run.ledger, opts.harness_run_id)
            opts.view_line = f"view on {child.url}"
        else:
            opts.view_line = view_line(ledger or cfg.run.ledger, opts.harness_run_id)
        code = serve_forever(run_wrapped(cfg, store, opts))
    finally:
        store.close()
        if child is not None:
            child.stop()
    check_line(ledger or cfg.run.ledger)
    if code:
        raise typer.Exit(code)
