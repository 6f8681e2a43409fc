"""An ablation plan: the design, the instances each cell needs, a random run order, and one run
config per cell (validated with the one settings module), written as TOML on request."""

from __future__ import annotations

import copy
import json
import stat
from pathlib import Path
from typing import Any

from wedgewatch.analysis.plan import design as dsg
from wedgewatch.analysis.plan.factors import USED_SERVER_AGE, Factor
from wedgewatch.analysis.plan.power import cell_size
from wedgewatch.analysis.plan.tomlout import dumps
from wedgewatch.analysis.text import table
from wedgewatch.base.errors import BadInput
from wedgewatch.base.redact import stored_url
from wedgewatch.config import Config, load_config, validate

# Without --base: the simulator playing the story's model and server (seed-used-server: the
# hypothesis that age and cold start matter more than the two flags), 100x faster than real.
DEFAULT_BASE: dict[str, Any] = {
    "server": {"profile": "sim", "scenario": "seed-used-server", "args": ["--policy", "swe"]},
    "run": {"time_scale": 100.0},
}


def make_plan(
    factors: list[Factor],
    *,
    fraction: bool = False,
    baseline: float = 0.05,
    effect: float = 0.2,
    alpha: float = 0.05,
    power: float = 0.8,
    seed: int = 0,
    name: str = "plan",
    base: Path | None = None,
    used_age: int = USED_SERVER_AGE,
) -> dict[str, Any]:
    """Everything ``wedgewatch plan`` prints, and each cell's config as a dict."""
    d = dsg.make(len(factors), fraction)
    size = cell_size(baseline, effect, alpha, power, d.cells, len(factors))
    base_cfg = load_config(base).model_dump(mode="json", exclude_defaults=True) if base else DEFAULT_BASE
    n = size["instances_per_cell"]
    order = dsg.run_order(d.cells, seed)
    width = len(str(d.cells))
    cells = []
    for c, row in enumerate(d.rows):
        levels = {f.name: f.levels[0 if x < 0 else 1] for f, x in zip(factors, row, strict=True)}
        cfg = copy.deepcopy(base_cfg)
        for f in factors:
            f.apply(cfg, levels[f.name], used_age)
        suite = cfg.setdefault("suite", {})
        if not any(suite.get(k) for k in ("ids", "slice", "regex")):
            suite["slice"] = f"0:{n}"
        run_id = f"{name}-c{c + 1:0{width}d}"
        dumped = validate(cfg, f"--factors/--base (cell {run_id})").model_dump(
            mode="json", exclude_defaults=True
        )
        if "ledger" in dumped.get("run", {}):
            # The cells' TOMLs, design.json, run.sh and --json are files and output anyone may be
            # shown: a password in the base's ledger URL stays in the base (see the note below).
            dumped["run"]["ledger"] = stored_url(dumped["run"]["ledger"])
        cells.append({"cell": c + 1, "run_id": run_id, "coded": row, "levels": levels, "config": dumped})
    base_model = Config.model_validate(base_cfg)
    profile = base_model.server.profile
    notes = [d.note] if d.note else []
    if stored_url(base_model.run.ledger) != base_model.run.ledger:
        notes.append(
            "the password in the ledger URL of --base is left out of the plan's configs and files: "
            "give it as PGPASSWORD (or in ~/.pgpass) when the runs start"
        )
    if base_model.suite.path is None and base_model.suite.dataset is None:
        from wedgewatch.suites import load_bundled

        if n > (have := len(load_bundled())):
            notes.append(
                f"each cell asks for {n} instances but the bundled suite has {have}: give a bigger "
                "suite in --base (suite.path or suite.dataset), or accept less power"
            )
    if any(f.name == "fresh" for f in factors) and profile != "sim":
        notes.append(
            f"fresh = off sets server.fresh = false: with the {profile} profile that adopts the server "
            "at server.url/port, which must already have served other work; wedgewatch cannot age it."
        )
    return {
        "factors": [{"name": f.name, "levels": list(f.levels), "meaning": f.meaning} for f in factors],
        "design": d.as_dict(),
        "aliases": dsg.aliases(d, [f.name for f in factors]),
        "sample_size": size,
        "seed": seed,
        "run_order": [cells[i]["run_id"] for i in order],
        "cells": cells,
        "ledger": Config.model_validate(cells[0]["config"]).run.ledger,
        "notes": notes,
    }


def write_plan(plan: dict[str, Any], out: Path) -> list[Path]:
    """One TOML per cell, design.json and run.sh (the runs in their random order) into ``out``.
    Each TOML is read back with ``load_config`` and must give the cell's config."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--out: {out}: {exc.strerror or exc}") from None
    written = []
    for cell in plan["cells"]:
        path = out / f"{cell['run_id']}.toml"
        levels = ", ".join(f"{k} = {v}" for k, v in cell["levels"].items())
        path.write_text(dumps(cell["config"], f"wedgewatch plan: cell {cell['cell']} ({levels})"))
        back = load_config(path)
        if back.hash() != validate(cell["config"], str(path)).hash():
            raise RuntimeError(f"{path}: the written config does not read back the same")
        written.append(path)
    (out / "design.json").write_text(json.dumps(plan, indent=2) + "\n")
    runs = " ".join(plan["run_order"])
    script = [
        "#!/bin/sh",
        "# The design's runs in their random order. Relative paths in the configs (ledger, work",
        "# and log directories) are taken from this directory.",
        "set -e",
        'cd "$(dirname "$0")"',
        *(f"wedgewatch run {rid}.toml --run-id {rid}" for rid in plan["run_order"]),
        f"wedgewatch plan --analyse {runs} --ledger {plan['ledger']}",
    ]
    sh = out / "run.sh"
    sh.write_text("\n".join(script) + "\n")
    sh.chmod(sh.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return [*written, out / "design.json", sh]


def render_plan(plan: dict[str, Any]) -> str:
    d, s = plan["design"], plan["sample_size"]
    lines = ["factors (effects are reported as second level minus first):"]
    lines += table(
        ["factor", "levels", "sets"],
        [[f["name"], " / ".join(map(str, f["levels"])), f["meaning"]] for f in plan["factors"]],
    )
    kind = f"{d['type']} design, {d['cells']} cells"
    if d["resolution"]:
        kind += f", resolution {d['resolution']} ({'; '.join(d['generators'])}; {', '.join(d['defining_relation'])})"
    lines += ["", kind]
    if plan["aliases"]:
        lines.append("aliased two-factor interactions: " + "; ".join(plan["aliases"]))
    lines += [
        "",
        f"instances per cell: {s['instances_per_cell']} (total {s['instances_total']}), to detect a wedge "
        f"rate of {s['baseline']:g} -> {s['target']:g} on any one factor with power {s['power']:g} at "
        f"α {s['alpha']:g}: {s['instances_per_level']} instances per level (Cohen's h {s['cohens_h']:.2f}); "
        f"one factor at a time would need {s['one_at_a_time_total']}.",
        "",
        f"cells in run order (seed {plan['seed']}):",
    ]
    by_id = {c["run_id"]: c for c in plan["cells"]}
    names = [f["name"] for f in plan["factors"]]
    lines += table(
        ["#", "run id", *names],
        [[n, rid, *(by_id[rid]["levels"][k] for k in names)] for n, rid in enumerate(plan["run_order"], 1)],
    )
    lines += ["", *plan["notes"]] if plan["notes"] else []
    return "\n".join(lines)
