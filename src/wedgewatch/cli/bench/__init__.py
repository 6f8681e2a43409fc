"""``wedgewatch bench``: benchmarks that print ratios measured side by side in one run.

Each benchmark is a module of this package that registers itself on ``bench_app``; the command
line imports only the one it was asked for (``cli/__init__.py``), so the commands a user types
stand apart from the benchmarks."""

from __future__ import annotations

import typer

from wedgewatch.cli._app import app

bench_app = typer.Typer(help="Benchmarks: ratios measured side by side in one run.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
