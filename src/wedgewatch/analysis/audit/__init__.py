"""``wedgewatch audit``: a wrapped harness's own results, joined to the request rows of the runs
``wrap`` recorded, per instance, and the score published beside the honest one (docs/wrap.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from wedgewatch.analysis.audit.join import (
    InstanceRun,
    assign_files,
    audit_run,
    harness_runs,
    run_requests,
)
from wedgewatch.analysis.audit.results import read_results
from wedgewatch.analysis.audit.signatures import Signatures, suite_statements
from wedgewatch.analysis.stats import rate
from wedgewatch.base.errors import BadInput
from wedgewatch.base.vocab import INFRA_FAILED, RECOVERED, RESOLVED, SUBMITTED, UNRESOLVED
from wedgewatch.ledger import Ledger

RERUN_FORMATS = ("miniswe", "swebench", "inspect", "ids")


def audit(
    results: list[Path], ledger_path: Path, suite: Path | None = None, harness_run: str | None = None
) -> dict[str, Any]:
    files = read_results(results)
    if not ledger_path.exists():
        raise BadInput(f"--ledger: {ledger_path} does not exist")
    ledger = Ledger(ledger_path, read_only=True)
    try:
        runs = harness_runs(ledger)
        if not runs:
            raise BadInput(f"--ledger: {ledger_path} holds no wrapped run (wedgewatch wrap writes them)")
        statements = suite_statements(suite) if suite is not None else {}
        sigs = Signatures()
        for iid, text in statements.items():
            sigs.add_statement(iid, text)
        for f in files:
            for iid, msgs in f.messages.items():
                sigs.add_messages(iid, msgs)
        known = set(statements) | {fact.instance_id for f in files for fact in f.facts}
        by_run = assign_files(files, runs, harness_run)
        per_run = []
        for run in runs:
            if run["harness_run_id"] not in by_run:
                continue
            rows = run_requests(ledger, run)
            per, counts = audit_run(run, rows, by_run[run["harness_run_id"]], sigs, known)
            per_run.append((run, per, counts))
    finally:
        ledger.close()
    result = _summarise(per_run, sorted(statements) if statements else sorted(known), files)
    result["attribution"] = _attribution(result["runs"], suite is not None)
    return result


def _attribution(runs: list[dict[str, Any]], with_suite: bool) -> dict[str, Any]:
    """The failed requests no instance could be given (the harness's own successful retries
    aside), and what would attribute them: without them the honest score is not known."""
    unattributed = sum(len(r["infra_unattributed"]) for r in runs)
    ambiguous = sum(len(r["infra_ambiguous"]) for r in runs)
    n = unattributed + ambiguous
    out: dict[str, Any] = {"failed_unattributed": unattributed, "failed_ambiguous": ambiguous}
    if not n:
        return {**out, "flag": None, "message": None}
    # Without --suite only trajectories' messages are signatures; with it, only a tag is left.
    flag = "--suite" if not with_suite else "--tag"
    how = (
        "pass --suite FILE (the suite's problem statements) to attribute them by content"
        if not with_suite
        else "tag each instance's requests (wrap --tag, or the x-wedgewatch-tag header) to attribute them"
    )
    message = (
        f"{n} failed request{'s' if n != 1 else ''} could not be attributed to one instance "
        f"({unattributed} unattributed, {ambiguous} ambiguous), so the honest score is not known: {how}"
    )
    return {**out, "flag": flag, "message": message}


def _final(
    iid: str, per_run: list[tuple[dict[str, Any], dict[str, InstanceRun], dict[str, Any]]]
) -> dict[str, Any]:
    """The instance's last verdict that was not infrastructure, over the runs it sent requests in."""
    seen = [(run, per[iid]) for run, per, _ in per_run if iid in per]
    sent = [(run, ir) for run, ir in seen if ir.requests] or seen[-1:]
    chosen = None
    for run, ir in sent:
        if not ir.infra or chosen is None or chosen[1].infra:
            chosen = (run, ir)
    if chosen is None:
        return {"instance_id": iid, "outcome": "not_run", "verdict": "not_run", "runs": []}
    run, ir = chosen
    return {
        "instance_id": iid,
        "verdict": ir.verdict,
        "outcome": ir.outcome,
        "harness_run": run["harness_run_id"],
        "requests": len(ir.requests),
        "stalls": ir.stalls,
        "upstream_errors": ir.upstream_errors,
        "restarts": ir.restarts,
        "ambiguous": ir.ambiguous,
        RECOVERED: ir.recovered,
        "runs": [
            {
                "harness_run": r["harness_run_id"],
                "verdict": x.verdict,
                "outcome": x.outcome,
                "requests": len(x.requests),
            }
            for r, x in seen
        ],
    }


def _summarise(per_run: list[Any], ids: list[str], files: list[Any]) -> dict[str, Any]:
    instances = [_final(iid, per_run) for iid in ids]
    graded = any(i["verdict"] in (RESOLVED, UNRESOLVED) for i in instances)
    success = RESOLVED if graded else SUBMITTED
    n = len(instances)
    k = sum(1 for i in instances if i["verdict"] == success)
    infra = [i["instance_id"] for i in instances if i["outcome"] == INFRA_FAILED]
    # A recovered instance keeps the harness's verdict: the agent went on with the retried answer.
    k_honest = sum(1 for i in instances if i["verdict"] == success and i["outcome"] != INFRA_FAILED)
    kinds = sorted({f.kind for f in files})
    return {
        "success": success,
        "instances": instances,
        "published": rate(k, n),
        "honest": rate(k_honest, n - len(infra)),
        INFRA_FAILED: infra,
        RECOVERED: [i["instance_id"] for i in instances if i["outcome"] == RECOVERED],
        "runs": [
            {"harness_run": run["harness_run_id"], "exit_code": run["exit_code"], **counts}
            for run, _, counts in per_run
        ],
        "kinds": kinds,
        "rerun_format": default_format(kinds),
    }


def default_format(kinds: list[str]) -> str:
    text = " ".join(kinds)
    if "inspect" in text:
        return "inspect"
    if "trajectory" in text or "preds" in text:
        return "miniswe"
    if "swebench" in text:
        return "swebench"
    return "ids"


def rerun_lines(ids: list[str], fmt: str) -> list[str]:
    """The selection in the harness's own syntax, one ``{rerun}`` argument per line:
    mini-swe-agent ``--filter`` takes one regex, the SWE-bench harness ``--instance_ids`` one id
    per argument, Inspect ``--sample-id`` a comma-separated list, and a plain list one id a line."""
    if fmt not in RERUN_FORMATS:
        raise BadInput(f"--rerun-format: {fmt!r} is not one of {', '.join(RERUN_FORMATS)}")
    if not ids:
        return []
    if fmt == "miniswe":
        return ["^(" + "|".join(re.escape(i) for i in ids) + ")$"]
    if fmt == "inspect":
        return [",".join(ids)]
    return list(ids)


def _pct(r: dict[str, Any]) -> str:
    if not r["n"]:
        return "n/a (0 instances)"
    lo, hi = r["ci95"]
    return f"{r['k']}/{r['n']} = {100 * r['rate']:.1f}% (95% CI {100 * lo:.1f}-{100 * hi:.1f}%)"


def render_text(result: dict[str, Any]) -> str:
    lines = [
        f"{'instance':<34} {'harness verdict':<28} {'req':>4} {'stall':>5} {'upstr':>5} {'rst':>4}  outcome"
    ]
    for i in result["instances"]:
        amb = f"  (+{i['ambiguous']} ambiguous)" if i.get("ambiguous") else ""
        lines.append(
            f"{i['instance_id']:<34} {i['verdict'][:28]:<28} {i.get('requests', 0):>4} {i.get('stalls', 0):>5} "
            f"{i.get('upstream_errors', 0):>5} {i.get('restarts', 0):>4}  {i['outcome']}{amb}"
        )
    lines.append("")
    for run in result["runs"]:
        by = ", ".join(f"{k} {v}" for k, v in sorted(run["by"].items()))
        lines.append(
            f"run {run['harness_run']} (exit {run['exit_code']}): {run['requests']} requests: {by}; "
            f"failed and sent again with success: {run[RECOVERED]}"
        )
        for key, what in (("infra_unattributed", "unattributed"), ("infra_ambiguous", "ambiguous")):
            for e in run[key]:
                cands = f" between {', '.join(e['candidates'])}" if e["candidates"] else ""
                lines.append(f"  {e['outcome']} request {e['request_id']}: {what}{cands}")
    lines.append("")
    lines.append(f"published score ({result['success']}): {_pct(result['published'])}")
    beside = f"{INFRA_FAILED} {len(result[INFRA_FAILED])}, {RECOVERED} {len(result[RECOVERED])} beside it"
    att = result.get("attribution") or {}
    lost = att.get("failed_unattributed", 0) + att.get("failed_ambiguous", 0)
    if lost:
        lines.append(
            f"honest score ({result['success']}): not known: {lost} failed requests attributed to no "
            f"one instance ({_pct(result['honest'])} only if none was an instance's), {beside}"
        )
    else:
        lines.append(f"honest score ({result['success']}): {_pct(result['honest'])}, {beside}")
    return "\n".join(lines)
