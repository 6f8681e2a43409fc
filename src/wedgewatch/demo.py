"""``wedgewatch demo``: the story's run replayed on the simulator, naive against guarded.

Both arms run the same 20 bundled instances, 4 at a time, on the same seed, against the
``seed-used-server`` scenario with the story's two flags (``hybrid-safe``):

- **naive** is what the story's harness did first: the OpenAI SDK's defaults (600 s timeout, 2
  retries), no proxy, no supervision, a server that already served other work, one attempt per
  instance, every failure scored against the model.
- **guarded** is wedgewatch: a fresh server, two warm-up requests, the proxy's deadlines, restarts
  on a wedge or after two consecutive API errors, and task-level retries in fresh sandboxes.

Every duration the server and the clients wait on is divided by ``time_scale``; the table shows
real seconds and, for hangs, the simulated seconds they stand for.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wedgewatch.config import Config, validate
from wedgewatch.errors import BadInput
from wedgewatch.ledger.store import Ledger

log = logging.getLogger(__name__)

ARMS = ("naive", "guarded")
REPORT = "report.html"  # both arms on one page, in out_dir
# How many requests the naive arm's server is said to have served before the run (the
# simulator's --preload-age): "a server that had already served another workload".
USED_SERVER_AGE = 3000


@dataclass
class DemoOptions:
    out_dir: Path = Path("wedgewatch-demo")
    seed: int = 1
    time_scale: float = 200.0
    instances: int = 20
    concurrency: int = 4
    step_limit: int = 15
    scenario: str = "seed-used-server"


def arm_config(arm: str, opts: DemoOptions) -> Config:
    """The run config of one arm. Everything but the procedure is the same in both."""
    out = opts.out_dir.resolve()
    common: dict[str, Any] = {
        "server": {
            "profile": "sim",
            "model": "sim-model",
            "scenario": opts.scenario,
            "arg_sets": ["hybrid-safe"],
            "args": ["--policy", "swe"],
            "log_dir": str(out / "logs" / arm),
            # Supervisor windows in the server's seconds; run.time_scale divides them.
            "wedge_window": 60.0,
            "canary_timeout": 20.0,
        },
        # The proxy's deadlines at their defaults (in the server's seconds).
        "watchdog": {},
        "agent": {"name": "bash", "step_limit": opts.step_limit},
        "suite": {"slice": f"0:{opts.instances}"},
        "run": {
            "concurrency": opts.concurrency,
            "ledger": str(out / "ledger.sqlite"),
            "workdir": str(out / "work"),
            "time_scale": opts.time_scale,
            "seed": opts.seed,
        },
    }
    if arm == "naive":
        common["server"]["args"] += ["--preload-age", str(USED_SERVER_AGE)]
        common["server"].update(
            {
                "warmup": {"count": 0},
                "restart_on_wedge": False,
                "restart_on_crash": False,
                "restart_after_api_errors": 0,
            }
        )
        common["watchdog"] = {"enabled": False}
        # The OpenAI SDK's defaults: 600 s and two silent retries (about 1,802 s on a hang).
        common["agent"].update({"client_timeout": 600.0, "client_retries": 2})
        common["run"]["attempts"] = 1
    elif arm != "guarded":
        raise ValueError(f"unknown arm {arm!r}")
    return validate(common, f"demo arm {arm}")


def arm_figures(ledger: Ledger, run_id: str, arm: str) -> dict[str, Any]:
    """The figures of one arm's row in the table, all from the ledger."""
    from wedgewatch.analysis.summary import summarise

    s = summarise(ledger, run_id)
    o = s["outcomes"]
    hangs = ledger.query(
        "SELECT COUNT(*) AS n, COALESCE(SUM(duration), 0) AS total, COALESCE(MAX(duration), 0) AS longest "
        "FROM attempt_view WHERE run_id = ? AND status = 'api_error'",
        (run_id,),
    )[0]
    # Instances whose attempts all failed with at least one API error (not a harness crash).
    hung_instances = ledger.query(
        "SELECT COUNT(*) FROM instance_outcomes WHERE run_id = ? AND outcome = 'infra_failed' "
        "AND n_api_error > 0",
        (run_id,),
    )[0][0]
    model_failures = o["unresolved"] + o["empty_patch"] + o["early_stop"]
    # The naive harness has no other column: whatever is not resolved is the model's failure.
    scored_failures = s["instances"] - o["resolved"] if arm == "naive" else model_failures
    return {
        "arm": arm,
        "run_id": run_id,
        "wall_seconds": s["wall_seconds"],
        "instances": s["instances"],
        "resolved": o["resolved"],
        "unresolved": o["unresolved"] + o["empty_patch"],
        "early_stop": o["early_stop"],
        "infra_failed": o["infra_failed"],
        "scored_as_model_failures": scored_failures,
        "hangs_scored_as_model_failures": hung_instances if arm == "naive" else 0,
        "api_errors": int(hangs["n"]),
        "stalls": sum(s["stalls"].values()),
        "restarts": s["server"]["restarts"],
        "wedges_detected": s["server"]["wedges"],
        "hang_seconds": float(hangs["total"]),
        "longest_hang_seconds": float(hangs["longest"]),
        "resolved_rate_all": s["resolved_rate_all"],
    }


MARKER = ".wedgewatch-demo"


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


def run_demo(opts: DemoOptions) -> list[dict[str, Any]]:
    """Run both arms one after the other (side by side would share two cores and blur the
    timings) and write their ledger and results into ``opts.out_dir``."""
    from wedgewatch.runner import main as runner_main
    from wedgewatch.runner.export import render

    prepare_out_dir(opts.out_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    figures = []
    for arm in ARMS:
        cfg = arm_config(arm, opts)
        log.info("demo: running the %s arm", arm)
        execution = runner_main.start(cfg, run_id=f"demo-{arm}-{stamp}")
        with Ledger(cfg.run.ledger) as ledger:
            figures.append(arm_figures(ledger, execution.run_id, arm))
            (opts.out_dir / f"results-{arm}.jsonl").write_text(render(ledger, execution.run_id, "results"))
    (opts.out_dir / "summary.json").write_text(json.dumps(figures, indent=2))
    write_report(Path(cfg.run.ledger), opts.out_dir / REPORT, figures)  # both arms share one ledger
    return figures


def write_report(ledger_path: Path, path: Path, figures: list[dict[str, Any]]) -> None:
    """Both arms on one HTML page, side by side (naive first)."""
    from wedgewatch.analysis.html import write_html

    with Ledger(ledger_path) as ledger:
        write_html(
            ledger,
            path,
            [f["run_id"] for f in figures],
            labels=[f["arm"] for f in figures],
            title="wedgewatch demo: naive against guarded",
        )


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f} s"


def table_rows(figures: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """(label, naive, guarded) rows of the side-by-side table."""
    by = {f["arm"]: f for f in figures}
    n, g = by["naive"], by["guarded"]

    def row(label: str, fn: Any) -> tuple[str, str, str]:
        return (label, fn(n), fn(g))

    return [
        row("wall-clock", lambda f: _secs(f["wall_seconds"])),
        row("resolved", lambda f: f"{f['resolved']} / {f['instances']}"),
        row("unresolved (model)", lambda f: str(f["unresolved"])),
        row("early stops (model)", lambda f: str(f["early_stop"])),
        row("scored as model failures", lambda f: str(f["scored_as_model_failures"])),
        row("  of which were hangs", lambda f: str(f["hangs_scored_as_model_failures"])),
        row("infra_failed, reported apart", lambda f: "-" if f["arm"] == "naive" else str(f["infra_failed"])),
        row("stalls caught by the proxy", lambda f: "no proxy" if f["arm"] == "naive" else str(f["stalls"])),
        row("attempts ended api_error", lambda f: str(f["api_errors"])),
        row("server restarts", lambda f: str(f["restarts"])),
        row("time lost to hangs (summed)", lambda f: _secs(f["hang_seconds"])),
        row("longest hung attempt", lambda f: _secs(f["longest_hang_seconds"])),
    ]


def footnote(time_scale: float) -> str:
    """What the scaled hang costs stand for at full scale."""
    timeout = 600.0 / time_scale
    return (
        f"At {time_scale:g}x the SDK's 600 s timeout lasts {timeout:.1f} s, so one hung request costs the "
        f"naive client 3 tries, about {3 * timeout:.0f} s plus backoff here: the story's 1,802 s. "
        "The guarded arm's proxy ends a stall after its scaled deadline (never under 1 s)."
    )
