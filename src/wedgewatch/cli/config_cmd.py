"""``wedgewatch config --example | --schema | --check FILE``."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli._app import app
from wedgewatch.config import Config, load_config


def example_text() -> str:
    """The commented example config (it runs as it is)."""
    return (resources.files("wedgewatch.runner") / "example.toml").read_text(encoding="utf-8")


@app.command("config")
def config_cmd(
    example: Annotated[
        bool, typer.Option("--example", help="Print a commented config that runs as it is.")
    ] = False,
    schema: Annotated[
        bool,
        typer.Option(
            "--schema", help="Print the JSON schema of the config (every field, its default and why)."
        ),
    ] = False,
    check: Annotated[
        Path | None, typer.Option("--check", help="Validate a config file; exit 2 naming the bad field.")
    ] = None,
) -> None:
    """The run config: an example, its schema, or a check of a file."""
    if sum((example, schema, check is not None)) != 1:
        raise BadInput("config: give exactly one of --example, --schema, --check FILE")
    if example:
        typer.echo(example_text(), nl=False)
    elif schema:
        typer.echo(json.dumps(Config.model_json_schema(), indent=2))
    else:
        assert check is not None
        cfg = load_config(check)
        from wedgewatch.supervisor import profiles

        for member in cfg.members():
            profiles.check(member, str(check))  # what only the server's profile can judge
        typer.echo(f"{check}: ok (config hash {cfg.hash()})")
