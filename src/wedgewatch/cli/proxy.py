"""``wedgewatch proxy``: the watchdog proxy in front of any OpenAI-compatible server."""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from wedgewatch.base import redact
from wedgewatch.base.errors import BadInput, ConfigError
from wedgewatch.cli._app import app, serve_forever
from wedgewatch.config import WatchdogConfig

log = logging.getLogger(__name__)

DEFAULT_RECORDS = Path(".wedgewatch/proxy-requests.jsonl")


def _d(name: str) -> str:
    return f"(default {WatchdogConfig.model_fields[name].default:g})"


_FLAGS = {
    "ttft_timeout": "--ttft-timeout",
    "stall_timeout": "--stall-timeout",
    "min_rate": "--min-rate",
    "rate_window": "--rate-window",
    "total_timeout": "--total-timeout",
    "passthrough_timeout": "--passthrough-timeout",
    "engine_ttft_timeout": "--engine-ttft-timeout",
    "engine_stall_timeout": "--engine-stall-timeout",
}


def watchdog_from_flags(values: dict[str, float | None]) -> Any:
    """A WatchdogConfig from the flags that were given; a bad value names its flag."""
    from wedgewatch.config import validate

    given = {k: v for k, v in values.items() if v is not None}
    try:
        return validate({"watchdog": given}, "wedgewatch proxy").watchdog
    except ConfigError as exc:
        name = (exc.field or "").removeprefix("watchdog.")
        flag = _FLAGS.get(name, name)
        message = str(exc).split(": ", 2)[-1]
        raise BadInput(f"{flag}: {message} (got {given.get(name)!r})") from None


@app.command("proxy")
def proxy(
    upstream: Annotated[
        str, typer.Option(help="Root URL of the OpenAI-compatible server (http://HOST:PORT, /v1 optional).")
    ],
    host: Annotated[
        str,
        typer.Option(
            help="Address to bind (loopback by default; beyond it only with --api-key or WEDGEWATCH_API_KEY)."
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="Port; 0 picks a free one. The first stdout line is 'listening on URL'.")
    ] = 8100,
    ttft_timeout: Annotated[
        float | None, typer.Option(help=f"Seconds to the first token {_d('ttft_timeout')}.")
    ] = None,
    stall_timeout: Annotated[
        float | None, typer.Option(help=f"Seconds without a token, mid-stream {_d('stall_timeout')}.")
    ] = None,
    min_rate: Annotated[
        float | None, typer.Option(help=f"Tokens/s below which a stream trickles, 0: off {_d('min_rate')}.")
    ] = None,
    rate_window: Annotated[
        float | None, typer.Option(help=f"Seconds over which --min-rate is measured {_d('rate_window')}.")
    ] = None,
    total_timeout: Annotated[
        float | None, typer.Option(help=f"Seconds for a whole request {_d('total_timeout')}.")
    ] = None,
    passthrough_timeout: Annotated[
        float | None,
        typer.Option(
            help=f"Seconds for a read passed through: /v1/models, /health, /metrics {_d('passthrough_timeout')}."
        ),
    ] = None,
    engine_ttft_timeout: Annotated[
        float | None,
        typer.Option(
            help=f"With --metrics-url: engine seconds to the first token {_d('engine_ttft_timeout')}."
        ),
    ] = None,
    engine_stall_timeout: Annotated[
        float | None,
        typer.Option(
            help=f"With --metrics-url: engine seconds without a token {_d('engine_stall_timeout')}."
        ),
    ] = None,
    metrics_url: Annotated[
        str | None,
        typer.Option(
            help="The server's /metrics: its heartbeat makes deadlines count engine time and finds a "
            "stopped engine (docs/proxy.md)."
        ),
    ] = None,
    scrape_interval: Annotated[float, typer.Option(help="Seconds between --metrics-url scrapes.")] = 1.0,
    heartbeat_window: Annotated[
        float, typer.Option(help="Seconds with requests in flight and nothing moving that stop them all.")
    ] = 8.0,
    ledger: Annotated[
        str | None,
        typer.Option(help="Write request rows into this ledger (a SQLite file or postgresql://...)."),
    ] = None,
    records: Annotated[
        Path | None,
        typer.Option(help=f"JSONL file of request rows when no --ledger (default {DEFAULT_RECORDS})."),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="WEDGEWATCH_API_KEY",
            show_envvar=True,
            help="Key every route but /health wants (Authorization: Bearer KEY, or x-api-key); needed "
            "to bind beyond loopback. Also read from WEDGEWATCH_API_KEY. Taken off before a request "
            "goes upstream (--upstream-api-key is sent in its place).",
        ),
    ] = None,
    upstream_api_key: Annotated[
        str | None,
        typer.Option(
            envvar="WEDGEWATCH_UPSTREAM_API_KEY",
            show_envvar=True,
            help="The upstream server's own key (vLLM's --api-key), sent upstream in place of --api-key "
            "and with --metrics-url scrapes; the same value as --api-key keeps one key for both. "
            "Also read from WEDGEWATCH_UPSTREAM_API_KEY.",
        ),
    ] = None,
) -> None:
    """Watch every generation's token stream; abort stalls upstream and answer the client with a
    non-retryable error (docs/proxy.md)."""
    from wedgewatch.wire import access

    if not upstream.startswith(("http://", "https://")):
        raise BadInput(f"--upstream: expected an http:// or https:// URL, got {redact.url(upstream)!r}")
    access.require_key(host, api_key)
    if not 0 <= port <= 65535:
        raise BadInput(f"--port: must be in 0..65535, got {port}")
    if metrics_url is not None and not metrics_url.startswith(("http://", "https://")):
        raise BadInput(f"--metrics-url: expected an http:// or https:// URL, got {metrics_url!r}")
    if scrape_interval <= 0:
        raise BadInput(f"--scrape-interval: must be > 0, got {scrape_interval:g}")
    if heartbeat_window <= 0:
        raise BadInput(f"--heartbeat-window: must be > 0, got {heartbeat_window:g}")
    if ledger is not None and records is not None:
        raise BadInput("--records: give either --ledger or --records, not both")
    watchdog = watchdog_from_flags(
        {
            "ttft_timeout": ttft_timeout,
            "stall_timeout": stall_timeout,
            "min_rate": min_rate,
            "rate_window": rate_window,
            "total_timeout": total_timeout,
            "passthrough_timeout": passthrough_timeout,
            "engine_ttft_timeout": engine_ttft_timeout,
            "engine_stall_timeout": engine_stall_timeout,
        }
    )
    heartbeat = (metrics_url, scrape_interval, heartbeat_window) if metrics_url else None
    serve_forever(
        _serve(
            upstream,
            host,
            port,
            watchdog,
            ledger,
            records or (None if ledger else DEFAULT_RECORDS),
            heartbeat,
            (api_key or None, upstream_api_key or None),
        )
    )


async def _serve(
    upstream: str,
    host: str,
    port: int,
    watchdog: Any,
    ledger_path: str | None,
    records: Path | None,
    heartbeat: tuple[str, float, float] | None,
    keys: tuple[str | None, str | None] = (None, None),
) -> None:
    from wedgewatch.stack import session
    from wedgewatch.stack.proxied import ProxiedServer

    url_, interval, window = heartbeat if heartbeat is not None else (None, 1.0, 8.0)
    server = ProxiedServer(
        upstream,
        watchdog,
        ledger_path=ledger_path,
        records=records,
        metrics_url=url_,
        scrape_interval=interval,
        heartbeat_window=window,
        api_key=keys[0],
        upstream_key=keys[1],
    )
    async with session.stopping() as stop:
        try:
            url = await server.start(host, port)  # a port in use is one line (stack/listen.py)
            typer.echo(f"listening on {url}")
            sys.stdout.flush()
            # Everything imported so far lives as long as the process: keep it out of the collector's
            # full passes, which otherwise stall every stream for tens of milliseconds now and then.
            gc.freeze()
            # Rows are written from a worker thread; by default it may keep the GIL for 5 ms at a
            # time, a pause every stream would feel (measured: event-loop lag p99 3-8 ms, 2 ms at 0.5 ms).
            sys.setswitchinterval(0.0005)
            shown = redact.url(str(ledger_path)) if ledger_path else records
            upstream_shown = redact.url(server.proxy.upstream.base_url)
            log.warning("proxy: %s -> %s (records: %s)", url, upstream_shown, shown)
            await stop.event.wait()
        finally:
            await server.stop()
