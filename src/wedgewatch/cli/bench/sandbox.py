"""``wedgewatch bench sandbox``: each sandbox backend's costs and containment, measured here
(docs/sandboxes.md quotes it)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli.bench import bench_app


@bench_app.command("sandbox")
def bench_sandbox(
    kind: Annotated[list[str] | None, typer.Option("--kind", help="Backend (repeat); default all.")] = None,
    cli: Annotated[str, typer.Option("--cli", help="Container CLI.")] = "podman",
    container_arg: Annotated[
        list[str] | None,
        typer.Option("--container-arg", help="Extra `run` argument (repeat); default --runtime runc."),
    ] = None,
    image: Annotated[
        str | None, typer.Option("--image", help="Container image (default: a testbed built here).")
    ] = None,
) -> None:
    """Create/command/close seconds and the escape attempts' results per backend; one JSON object."""
    from wedgewatch.bench.sandbox import run
    from wedgewatch.sandbox import REGISTRY

    kinds = kind or ["local", "bwrap", "container"]
    unknown = [k for k in kinds if k not in REGISTRY]
    if unknown:
        raise BadInput(f"--kind: unknown backend {unknown[0]!r} (known: {', '.join(sorted(REGISTRY))})")
    typer.echo(json.dumps(run(kinds, cli, container_arg or ["--runtime", "runc"], image), indent=1))
