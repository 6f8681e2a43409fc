"""``wedgewatch demo``: the story's run replayed on the simulator, one harness per arm, all on the
same server condition, each score beside the model's true skill.

Arms run one after the other (side by side they would share two cores and blur the timings), seed
after seed, into one ledger in ``out_dir``; every figure is then read back from that ledger
(``cells``) and aggregated over seeds (``table``). See docs/demo.md.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
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
    """A demo starts clean, but only ever removes a directory an earlier demo made (it holds the
    marker file): ``--out .`` or ``--out ~`` must not cost anyone their files."""
    if out.exists() and not (out / MARKER).is_file() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out: {out} exists and was not made by wedgewatch demo; choose another directory")


def prepare_out_dir(out: Path) -> None:
    check_out_dir(out)
    if (out / MARKER).is_file():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("made by wedgewatch demo; the next demo run replaces this directory\n")


def scenario_skill(scenario: str) -> float:
    """The model's skill in the scenario (``[policy] skill``): the truth's other half."""
    from wedgewatch.sim.scenario import load_scenario

    return load_scenario(scenario).policy.skill


def run_demo(opts: DemoOptions) -> dict[str, Any]:
    """Run every arm at every seed; return the JSON document ``--json`` prints (docs/demo.md)."""
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
            runner_main.start(cfg, run_id=run_id)
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
