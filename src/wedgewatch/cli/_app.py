"""The typer application every command module registers on, and the event loop servers run on."""

from __future__ import annotations

from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

from wedgewatch.base.errors import BadInput

if TYPE_CHECKING:
    from wedgewatch.ledger import Ledger

T = TypeVar("T")

# `wedgewatch --help` lists commands in the order a user meets them, not in import order.
_ORDER = (
    "demo", "sim", "proxy", "serve", "wrap", "run", "view", "report", "export", "import-report",
    "suite", "audit", "compare", "lives", "scan", "plan", "ledger", "config", "bench", "version",
)  # fmt: skip


class _Commands(TyperGroup):
    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        rank = {name: i for i, name in enumerate(_ORDER)}
        return sorted(names, key=lambda n: (rank.get(n, len(_ORDER)), n))


app = typer.Typer(
    cls=_Commands,
    name="wedgewatch",
    help="Agent evaluations against self-hosted LLM servers that never mistake a wedged server "
    "for a weak model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: it rewraps docstrings and never cuts long flag names at 80 columns.
    rich_markup_mode=None,
)


LedgerOption = Annotated[
    str | None,
    typer.Option("--ledger", help="Ledger: a SQLite file or postgresql://... (default: wedgewatch.sqlite)."),
]
"""The ``--ledger`` flag of every command that reads a ledger."""


def open_ledger(path: str | Path | None, write: bool = False) -> Ledger:
    """The ledger at ``path`` (default: run.ledger's default), opened to read (``write``: to add
    rows, as ``import-report`` does); BadInput if it does not exist or is no wedgewatch ledger."""
    # Imported here: a command that opens no ledger (a simulator, the proxy) starts without
    # the config's models and the ledger (docs/architecture.md, the CLI's start-up).
    from wedgewatch.config import RunConfig
    from wedgewatch.ledger import Ledger
    from wedgewatch.ledger.target import exists

    p = str(path) if path is not None else RunConfig().ledger
    if not exists(p):
        raise BadInput(f"--ledger: {p} does not exist")
    if write:
        Ledger(p, read_only=True).close()  # refuse what is no wedgewatch ledger before writing to it
    return Ledger(p, read_only=not write)


ViewOption = Annotated[
    bool,
    typer.Option(
        "--view",
        help="Serve the live page of the ledger (wedgewatch view) beside it, in a process of its own, "
        "and print its address on stderr.",
    ),
]
"""The ``--view`` flag of ``serve``, ``run`` and ``wrap``."""


def view_line(ledger_path: str, run_id: str | None = None) -> str:
    """The command that shows the ledger live, for a command to print on stderr."""
    from wedgewatch.base import redact

    line = f"watch it live: wedgewatch view {redact.url(str(ledger_path))}"
    return line + (f" --run {run_id}" if run_id else "")


def start_view(ledger_path: str, run_id: str | None = None) -> Any:
    """``--view``: ``wedgewatch view`` in a process of its own (``view/child.py``), started and
    listening (``.url``), for the command to print when it has started, and to ``stop()``."""
    from wedgewatch.view.child import ViewChild

    child = ViewChild(ledger_path, run_id)
    child.start()
    return child


def check_line(ledger_path: str) -> None:
    """The ledger's invariants, checked at the end of a command that wrote it: one line on stderr
    (stdout may be JSON a program reads). A broken one is named by ``wedgewatch ledger check``."""
    from wedgewatch.ledger import Ledger, checks

    with Ledger(ledger_path, read_only=True) as ledger:
        typer.echo(checks.check(ledger).line(), err=True)


def serve_forever(main: Coroutine[Any, Any, T]) -> T:
    """Run a long-lived server (the proxy, ``serve``) on uvloop where it is installed, as vLLM's
    API server does: at 64 streams the proxy's added inter-token p99 went from a median of 2.1 ms
    to 1.8 ms (docs/benchmarks.md)."""
    try:
        import uvloop
    except ImportError:  # Windows: uvloop does not build there
        import asyncio

        return asyncio.run(main)
    return uvloop.run(main)
