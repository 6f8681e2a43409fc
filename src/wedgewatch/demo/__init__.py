"""``wedgewatch demo``: the story's run replayed on the simulator, one harness per arm, all on the
same server condition, each score beside the model's true skill.

Arms run one after the other (side by side they would share two cores and blur the timings), seed
after seed, into one ledger in ``out_dir``; every figure is then read back from that ledger
(``cells``) and aggregated over seeds (``table``). See docs/demo.md.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import BadInput
from wedgewatch.demo.arms import ARMS, DEFAULT_ARMS, Condition, arm_config
from wedgewatch.demo.cells import arm_cells
from wedgewatch.demo.table import aggregate
from wedgewatch.ledger.store import Ledger

log = logging.getLogger(__name__)

REPORT = "report.html"  # every arm on one page, in out_dir
MARKER = ".wedgewatch-demo"
SCENARIO = "story"


@dataclass
class DemoOptions:
    out_dir: Path = Path("wedgewatch-demo")
    seed: int = 1
    seeds: int = 1
    arms: list[str] = field(default_factory=lambda: list(DEFAULT_ARMS))
    lora: bool = False
    time_scale: float = 200.0
    instances: int = 20
    concurrency: int = 4
    step_limit: int = 15
    scenario: str = SCENARIO
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per arm, config sections merged last (``--set ARM:section.field=VALUE``)."""

    def condition(self, seed: int) -> Condition:
        return Condition(
            self.out_dir,
            self.scenario,
            seed,
            self.time_scale,
            self.instances,
            self.concurrency,
            self.step_limit,
            self.lora,
        )


def check_out_dir(out: Path) -> None:
    """A demo only ever writes into a directory an earlier demo made (it holds the marker file)
    or a new or empty one: ``--out .`` or ``--out ~`` must not cost anyone their files."""
    if out.exists() and not (out / MARKER).is_file() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out: {out} exists and was not made by wedgewatch demo; choose another directory")


DERIVED = ("summary.json", REPORT, "results-*.jsonl")
"""What a demo writes from its ledger, and the next demo in the directory writes anew: the
ledger (every earlier run stays in it, append-only), the server logs and the sandboxes stay."""


def earlier_runs(out: Path) -> list[str]:
    """The runs an earlier demo left in ``out``'s ledger, oldest first (none for a new directory)."""
    path = out / "ledger.sqlite"
    if not (out / MARKER).is_file() or not path.is_file():
        return []
    from wedgewatch.ledger import queries

    with Ledger(path, read_only=True) as ledger:
        return queries.run_ids(ledger)


def prepare_out_dir(out: Path) -> None:
    """Ready ``out`` for a demo: its ledger is kept (the new runs are added to it), the files the
    last demo derived from it are removed, so no stale results file is taken for the new run's."""
    check_out_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    for pattern in DERIVED:
        for stale in out.glob(pattern):
            stale.unlink()
    (out / MARKER).write_text(
        "made by wedgewatch demo; the next demo here adds its runs to ledger.sqlite and writes "
        f"{', '.join(DERIVED)} anew\n"
    )


def scenario_skill(scenario: str) -> float:
    """The model's skill in the scenario (``[policy] skill``): the truth's other half."""
    from wedgewatch.sim.scenario import load_scenario

    return load_scenario(scenario).policy.skill


Progress = Callable[[str, int, str, dict[str, Any] | None], None]
"""Told each arm's start and end: ``(arm, seed, run_id, None)`` as it starts, ``(arm, seed,
run_id, cells)`` when it has ended (docs/demo.md, Output)."""


def run_demo(opts: DemoOptions, progress: Progress | None = None, live: bool = False) -> dict[str, Any]:
    """Run every arm at every seed; return the JSON document ``--json`` prints (docs/demo.md).
    ``live``: each run's own progress display (on a terminal)."""
    from wedgewatch.analysis.export import render
    from wedgewatch.runner import entry as runner_main

    skill = scenario_skill(opts.scenario)  # a bad --scenario fails before anything runs
    prepare_out_dir(opts.out_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    ledger_path = opts.out_dir / "ledger.sqlite"
    arms: list[dict[str, Any]] = []
    for name in opts.arms:
        arm = ARMS[name]
        runs = []
        for seed in range(opts.seed, opts.seed + opts.seeds):
            cfg = arm_config(name, opts.condition(seed), opts.overrides.get(name))
            log.info("demo: the %s arm, seed %d", name, seed)
            run_id = f"demo-{name}-s{seed}-{stamp}"
            if progress is not None:
                progress(name, seed, run_id, None)
            runner_main.start(cfg, run_id=run_id, show_progress=live)
            with Ledger(cfg.run.ledger) as ledger:
                cells = arm_cells(
                    ledger,
                    run_id,
                    skill=skill,
                    seed=seed,
                    time_scale=opts.time_scale,
                    reports_infra_apart=arm.reports_infra_apart,
                )
                (opts.out_dir / f"results-{name}-s{seed}.jsonl").write_text(render(ledger, run_id, "results"))
            runs.append({"seed": seed, "run_id": run_id, **cells})
            if progress is not None:
                progress(name, seed, run_id, cells)
        arms.append(
            {
                "arm": name,
                "title": arm.title,
                "reports_infra_apart": arm.reports_infra_apart,
                "runs": runs,
                "cells": aggregate(runs),
            }
        )
    doc = {
        "scenario": opts.scenario,
        "lora": opts.lora,
        "skill": skill,
        "seeds": list(range(opts.seed, opts.seed + opts.seeds)),
        "time_scale": opts.time_scale,
        "instances": opts.instances,
        "concurrency": opts.concurrency,
        "ledger": str(ledger_path),
        "report": str(opts.out_dir / REPORT),
        "arms": arms,
    }
    (opts.out_dir / "summary.json").write_text(json.dumps(doc, indent=2))
    write_report(ledger_path, opts.out_dir / REPORT, arms)
    return doc


def write_report(ledger_path: Path, path: Path, arms: list[dict[str, Any]]) -> None:
    """Every arm on one HTML page, side by side (the first seed's run of each, in arm order)."""
    from wedgewatch.analysis.html import write_html

    with Ledger(ledger_path) as ledger:
        write_html(
            ledger,
            path,
            [a["runs"][0]["run_id"] for a in arms],
            labels=[a["arm"] for a in arms],
            title=f"wedgewatch demo: {', '.join(a['arm'] for a in arms)} on one server condition",
        )
