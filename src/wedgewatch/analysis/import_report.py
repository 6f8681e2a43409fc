"""Import the official SWE-bench harness's run report as evaluations (source ``swebench_report``).

The report (``swebench.harness.reporting.make_run_report``) lists ids under ``resolved_ids``,
``unresolved_ids``, ``error_ids``, ``empty_patch_ids`` and, since its schema 2,
``infra_failure_ids`` (a subset of the unresolved and error ids whose logs show an environment
failure). Verdicts:

- resolved_ids -> resolved 1
- unresolved_ids, error_ids -> resolved 0 (the official harness scores both as not resolved)
- infra_failure_ids -> resolved NULL: the evaluation could not run, which is not the model's
  doing; the instance stays pending until a later verdict (wedgewatch's rule, stricter than the
  official score, which counts them as failures)
- empty_patch_ids -> resolved 0 (the outcome view already calls an empty patch empty_patch)

Each verdict is a new ``evaluations`` row on the instance's final (model-side) attempt; the latest
verdict wins in ``attempt_view``. Ids of instances without a model outcome in this run are
reported back, not written.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import BadInput
from wedgewatch.base.vocab import EMPTY_PATCH, RESOLVED, UNRESOLVED
from wedgewatch.ledger import queries
from wedgewatch.ledger.store import Ledger

_KEYS = ("resolved_ids", "unresolved_ids", "error_ids", "empty_patch_ids")


@dataclass
class ImportResult:
    run_id: str
    written: dict[str, int] = field(default_factory=dict)
    not_in_run: list[str] = field(default_factory=list)
    no_model_outcome: list[str] = field(default_factory=list)


def read_report(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInput(f"{p}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"{p}: not a JSON report: {exc}") from None
    if not isinstance(data, dict) or not any(k in data for k in _KEYS):
        raise BadInput(f"{p}: not a SWE-bench run report (no {', '.join(_KEYS)})")
    for key in (*_KEYS, "infra_failure_ids"):
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise BadInput(f"{p}: {key} must be a list of instance ids")
    return data


def verdicts(report: dict[str, Any]) -> dict[str, tuple[int | None, str]]:
    """instance_id -> (resolved, verdict name), applying the rules in the module docstring."""
    out: dict[str, tuple[int | None, str]] = {}
    for iid in report.get("empty_patch_ids", []):
        out[iid] = (0, EMPTY_PATCH)
    for iid in report.get("error_ids", []):
        out[iid] = (0, "error")
    for iid in report.get("unresolved_ids", []):
        out[iid] = (0, UNRESOLVED)
    for iid in report.get("resolved_ids", []):
        out[iid] = (1, RESOLVED)
    for iid in report.get("infra_failure_ids", []):
        out[iid] = (None, "infra_failure")
    return out


def import_report(ledger: Ledger, run_id: str | None, path: str | Path) -> ImportResult:
    run = queries.resolve_run(ledger, run_id)
    rid = run["run_id"]
    report = read_report(path)
    finals = {r["instance_id"]: r["final_attempt"] for r in queries.instance_outcomes(ledger, rid)}
    result = ImportResult(run_id=rid)
    rows: list[dict[str, Any]] = []
    now = time.time()
    for iid, (resolved, verdict) in sorted(verdicts(report).items()):
        if iid not in finals:
            result.not_in_run.append(iid)
            continue
        attempt_id = finals[iid]
        if attempt_id is None:
            result.no_model_outcome.append(iid)
            continue
        rows.append(
            {
                "attempt_id": attempt_id,
                "ts": now,
                RESOLVED: resolved,
                "source": "swebench_report",
                "detail_json": {"verdict": verdict, "report": str(path)},
            }
        )
        result.written[verdict] = result.written.get(verdict, 0) + 1
    ledger.append_many("evaluations", rows)
    return result
