"""``wedgewatch bench continuation``: a begun reply continued by its text or from its token ids,
on a real vLLM; docs/real-servers.md quotes the figures."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli.bench import bench_app


@bench_app.command("continuation")
def bench_continuation(
    url: Annotated[
        str | None,
        typer.Option("--url", help="A running vLLM serving gemma3-270m; else the bundled one is started."),
    ] = None,
    tokens: Annotated[int, typer.Option("--tokens", help="Tokens of each one-go reply.")] = 60,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Five prompts at temperature 0, each reply cut after 7, 30 and 45 tokens and continued the
    two ways the proxy resumes a stream: by its text (continue_final_message) and from its token
    ids (/v1/completions). Counts the cases whose client read exactly the one-go text and usage.
    Against the bundled vLLM on this CPU: one engine start, about 80 s in all on 2 cores."""
    from wedgewatch.bench.continuation import run

    if tokens <= 45:
        raise BadInput("--tokens: more than 45 (the last split)")
    figures = asyncio.run(run(url, tokens))
    if json_out:
        typer.echo(json.dumps(figures, indent=2))
        return
    typer.echo(
        f"wedgewatch bench continuation ({figures['model']}, temperature 0, {figures['tokens']} tokens)"
    )
    typer.echo("| cut | route | the one-go text | the one-go usage |")
    typer.echo("|---|---|---|---|")
    splits = ", ".join(str(k) for k in figures["splits"])
    for group, cut in (("at_splits", f"after {splits} tokens"), ("at_newlines", "after the first line")):
        g = figures[group]
        for route, name in (
            ("text", "text (continue_final_message)"),
            ("ids", "token ids (/v1/completions)"),
        ):
            r = g[route]
            typer.echo(
                f"| {cut} | {name} | {r['exact']} of {g['cases']} | {r['usage_exact']} of {g['cases']} |"
            )
    for c in figures["each"]:
        missed = [route for route in ("text", "ids") if not c[route]["exact"]]
        if missed:
            typer.echo(
                f"  prompt {c['prompt']} cut after {c['split']} tokens (read so far ends {c['cut_ends']!r}): "
                f"{', '.join(missed)} differ"
            )
