"""The typer application every command module registers on."""

import typer

app = typer.Typer(
    name="wedgewatch",
    help="Agent evaluations against self-hosted LLM servers that never mistake a wedged server "
    "for a weak model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: it rewraps docstrings and never cuts long flag names at 80 columns.
    rich_markup_mode=None,
)
