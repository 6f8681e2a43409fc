"""``wedgewatch suite [CONFIG] [--out FILE]``: the suite a run would attempt, as SWE-bench JSONL.

The bundled suite ships inside the package; a harness under ``wrap``, and ``audit --suite``, want
it as a file (``audit`` hashes its problem statements to attribute requests by content). With a
config, its ``[suite]`` as ``run`` would load it: path or dataset, then ids, regex and slice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli._app import app


@app.command("suite")
def suite_cmd(
    config: Annotated[
        Path | None, typer.Argument(help="Config TOML whose [suite] to write (default: the bundled suite).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="File to write (default: standard output).")
    ] = None,
) -> None:
    """Write the suite as SWE-bench JSONL, one instance per line: the bundled one, or a config's."""
    from wedgewatch.config import SuiteConfig, load_config
    from wedgewatch.suites.load import load_suite

    chosen = load_config(config).suite if config is not None else SuiteConfig()
    suite = load_suite(chosen)
    text = "".join(json.dumps(i, ensure_ascii=False) + "\n" for i in suite.instances)
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"--out: {out} cannot be written: {exc.strerror or exc}") from None
    typer.echo(f"{out}: {len(suite.instances)} instances ({suite.source})", err=True)
