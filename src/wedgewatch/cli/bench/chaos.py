"""``wedgewatch bench chaos``: the bundled suite under a seeded schedule of faults, on the engine and
on wedgewatch itself, and the invariants checked against a fault-free control (``bench/chaos``)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from wedgewatch.base.errors import BadInput
from wedgewatch.cli.bench import bench_app


def _control_dir(engine: str, shape: Any) -> Path:
    """Where the controls of this engine and shape are kept: every seed shares them."""
    import wedgewatch
    from wedgewatch.bench.chaos import engines

    key = json.dumps([engines.describe(engines.ENGINES[engine]), vars(shape), wedgewatch.__version__])
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "wedgewatch" / "chaos"
    return cache / f"{engine}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


@bench_app.command("chaos")
def bench_chaos(
    engine: Annotated[str, typer.Option("--engine", help="sim, vllm-cpu or llamacpp.")] = "sim",
    faults: Annotated[int, typer.Option("--faults", help="Faults in the schedule.")] = 20,
    seed: Annotated[list[int] | None, typer.Option("--seed", help="The schedule's seed; repeatable.")] = None,
    kind: Annotated[
        list[str] | None,
        typer.Option("--kind", metavar="KIND", help="Only these kinds of fault; repeatable."),
    ] = None,
    instances: Annotated[
        int | None, typer.Option("--instances", help="Bundled instances (default: all 20).")
    ] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", help="Instances at a time.")] = None,
    fast: Annotated[
        bool,
        typer.Option("--fast", help="A test's heartbeat window (2 s) and scrapes (0.2 s), not the defaults."),
    ] = False,
    steps: Annotated[
        int | None, typer.Option("--steps", help="The agent's step limit (default: the engine's).")
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", help="The agent's max_tokens (default: the engine's).")
    ] = None,
    control_dir: Annotated[
        Path | None, typer.Option("--control-dir", help="Where the two fault-free runs are kept (made once).")
    ] = None,
    keep: Annotated[
        Path | None, typer.Option("--keep", help="Keep the struck runs in this directory.")
    ] = None,
    settle_timeout: Annotated[
        float,
        typer.Option(
            "--settle-timeout", help="Seconds the rig waits for the run to serve again after a fault."
        ),
    ] = 900.0,
    run_timeout: Annotated[
        float,
        typer.Option(
            "--run-timeout", help="Seconds a run may take after its last fault before it is killed."
        ),
    ] = 7200.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print every seed's report as JSON.")] = False,
) -> None:
    """Two fault-free runs of the bundled suite with the bash agent (the control: they must match
    request by request), then the same run under a seeded schedule of faults placed on token
    progress: the engine frozen, slowed, killed, exiting 0, its error event, its connections reset;
    wedgewatch's own run SIGKILLed and resumed, a sandbox's command killed, the ledger's disk full
    and its file size limited; two faults close together. Then the invariants: one final outcome
    per instance, the control's outcomes from the control's replies, ledger check clean, no row
    lost, nothing left, every fault's cost bounded, the runner's memory and files flat. Exit 1 when
    an invariant broke (each printed with the fault before it and the command that replays it)."""
    from wedgewatch.bench.chaos import driver, engines, kinds, report

    if engine not in engines.ENGINES:
        raise BadInput(f"--engine: no engine {engine!r} (sim, vllm-cpu, llamacpp)")
    eng = engines.ENGINES[engine]
    allowed = kinds.kinds_for(engine)
    chosen = list(kind or allowed)
    bad = [k for k in chosen if k not in allowed]
    if bad:
        raise BadInput(f"--kind: {bad[0]!r} is not a fault of {engine} (its kinds: {', '.join(allowed)})")
    if faults < 1:
        raise BadInput(f"--faults: needs 1 or more, got {faults}")
    n = instances or eng.instances
    if not 1 <= n <= 20:
        raise BadInput(f"--instances: the bundled suite has 20 instances, got {n}")
    conc = concurrency or eng.concurrency
    if conc < 1:
        raise BadInput(f"--concurrency: needs 1 or more, got {conc}")
    for flag, value in (("--steps", steps), ("--max-tokens", max_tokens)):
        if value is not None and value < 1:
            raise BadInput(f"{flag}: needs 1 or more, got {value}")
    shape = engines.Shape(n, conc, fast, steps, max_tokens)
    seeds = list(seed or [1])
    controls = control_dir or _control_dir(engine, shape)
    controls.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d")
    reports = []
    with tempfile.TemporaryDirectory(prefix="ww-bench-chaos-") as tmp:
        root = keep or Path(tmp)
        for s in seeds:
            replay = f"wedgewatch bench chaos --engine {engine} --faults {faults} --seed {s}"
            replay += "".join(f" --kind {k}" for k in (kind or []))
            replay += (f" --instances {n}" if instances else "") + (
                f" --concurrency {conc}" if concurrency else ""
            )
            replay += " --fast" if fast else ""
            replay += (f" --steps {steps}" if steps else "") + (
                f" --max-tokens {max_tokens}" if max_tokens else ""
            )
            reports.append(
                rep := driver.run_bench(
                    engine=eng,
                    shape=shape,
                    seed=s,
                    faults=faults,
                    kinds=chosen,
                    root=root,
                    control_dir=controls,
                    settle_timeout=settle_timeout,
                    run_timeout=run_timeout,
                    replay=replay,
                )
            )
            if keep is not None:
                (keep / f"seed-{s}" / "report.json").write_text(json.dumps(rep, indent=1, default=str))
    if json_out:
        typer.echo(json.dumps({"date": started, "reports": reports}, indent=2, default=str))
    else:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        typer.echo(
            f"wedgewatch bench chaos --engine {engine} --faults {faults} ({started}; load average after: {load})"
        )
        typer.echo(f"{n} bundled instances, {conc} at a time, the bash agent; controls in {controls}\n")
        for rep in reports:
            for line in report.lines(rep):
                typer.echo(line)
            typer.echo("")
        for line in report.table(reports):
            typer.echo(line)
    if any(rep["broken"] for rep in reports):
        raise typer.Exit(1)
