"""Two more harnesses' result files, from their published models (not from files those harnesses
wrote here: neither runs on this machine):

- Harbor's trial ``result.json`` (``harbor.models.trial.result.TrialResult``): ``task_name``,
  ``trial_name``, ``verifier_result.rewards`` (``reward``: 1 is a pass), ``exception_info``
  (``exception_type``, ``exception_message``), ``started_at``/``finished_at`` (ISO 8601).
- OpenHands' evaluation ``output.jsonl`` (its ``EvalOutput``, one per line): ``instance_id``,
  ``test_result.git_patch``, ``error`` (null when the run ended normally), ``history``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from wedgewatch.analysis.scan.records import Facts, FileData, Sample
from wedgewatch.base.vocab import RESOLVED, UNRESOLVED


def is_harbor_trial(data: dict[str, Any]) -> bool:
    return (
        isinstance(data.get("task_name"), str)
        and "trial_name" in data
        and ("verifier_result" in data or "exception_info" in data)
    )


def _seconds(start: Any, end: Any) -> float | None:
    try:
        return (datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))).total_seconds()
    except ValueError:
        return None


def harbor_trial(name: str, data: dict[str, Any]) -> FileData:
    fd = FileData(name, "harbor trial result")
    facts = Facts(str(data["task_name"]), name)
    exc = data.get("exception_info")
    if isinstance(exc, dict):
        facts.status = (
            f"{exc.get('exception_type') or 'Exception'} {str(exc.get('exception_message') or '')[:300]}"
        )
    verifier = data.get("verifier_result")
    rewards = verifier.get("rewards") if isinstance(verifier, dict) else None
    reward = rewards.get("reward") if isinstance(rewards, dict) else None
    if isinstance(reward, int | float) and not exc:
        facts.outcome = RESOLVED if reward >= 1 else UNRESOLVED
    fd.facts = [facts]
    if data.get("started_at") and data.get("finished_at"):
        seconds = _seconds(data["started_at"], data["finished_at"])
        if seconds is not None:
            fd.samples = [Sample(facts.instance_id, seconds, facts.status, name)]
    return fd


def is_openhands(rows: list[Any]) -> bool:
    return bool(rows) and all(
        isinstance(r, dict) and "instance_id" in r and isinstance(r.get("test_result"), dict) for r in rows
    )


def openhands_rows(name: str, rows: list[dict[str, Any]]) -> FileData:
    fd = FileData(name, "openhands output")
    for r in rows:
        facts = Facts(str(r["instance_id"]), name)
        if r.get("error"):
            facts.status = "Error " + str(r["error"]).splitlines()[0][:300]
        patch = r["test_result"].get("git_patch")
        facts.patch_empty = not str(patch or "").strip()
        fd.facts.append(facts)
    return fd
