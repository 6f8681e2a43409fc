"""``wedgewatch bench``: benchmarks that print ratios measured side by side in one run.

Each benchmark registers itself on ``bench_app`` from its own module (``bench_*.py``)."""

from __future__ import annotations

import typer

from wedgewatch.cli._app import app

bench_app = typer.Typer(help="Benchmarks: ratios measured side by side in one run.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
