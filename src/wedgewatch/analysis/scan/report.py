"""``scan``: find the instances another harness scored as model failures that look like client
timeouts (a hung server), and say how the score changes if they are counted as infrastructure.

Evidence per instance (any file may give some of it; files are joined on the instance id):
- ``status``: an exit status or error naming a timeout or an API/connection error;
- ``api_error``: the file's own api_error flag;
- ``cluster``: a duration in a tight cluster (``clusters.find_clusters``);
- ``timeout_match``: a duration equal to k x T + backoff for a hinted T (600 s, the OpenAI SDK's
  default, and any ``--timeout-hint``);
- ``empty_patch``: no patch, which a hung agent leaves behind.
An instance not resolved is suspicious with ``status``, ``api_error`` or ``cluster``; or with a
``timeout_match`` of two or more tries (a single T-long run can be natural) or with an empty patch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wedgewatch.analysis import stats
from wedgewatch.analysis.scan import clusters as cl
from wedgewatch.analysis.scan.readers import FileData, expand, read
from wedgewatch.analysis.text import points, rate_text, table
from wedgewatch.base.vocab import API_ERROR, EMPTY_PATCH, INFRA_FAILED, PENDING, RESOLVED, SUBMITTED

TIMEOUT_RE = re.compile(r"time[ds]?[_ -]?out|deadline|\bstall|\bhang\b|\bhung\b", re.IGNORECASE)
API_RE = re.compile(
    r"api[ _]?error|api[ _]?connection|connection|internal[ _]?server|service[ _]?unavailable|"
    r"bad[ _]?gateway|gateway|upstream|rate[ _]?limit|overloaded|server_(restarted|down)|"
    r"remote[ _]?protocol|incomplete[ _]?read|\b50[0-4]\b",
    re.IGNORECASE,
)
REPORT_KINDS = ("swebench report", "swebench instance report")


def status_kind(text: str) -> str | None:
    """``timeout``, ``api_error`` or None for a status/error text."""
    if TIMEOUT_RE.search(text):
        return "timeout"
    if API_RE.search(text):
        return API_ERROR
    return None


@dataclass
class Instance:
    instance_id: str
    outcome: str | None = None
    outcome_from_report: bool = False
    statuses: list[str] = field(default_factory=list)
    api_error: bool = False
    early_stop: bool = False
    patch_empty: bool | None = None
    excluded: bool = False  # the file's own score already leaves it out (wedgewatch's infra_failed)
    durations: list[float] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)


def _merge(files: list[FileData]) -> dict[str, Instance]:
    out: dict[str, Instance] = {}
    for fd in files:
        from_report = fd.kind in REPORT_KINDS
        for f in fd.facts:
            inst = out.setdefault(f.instance_id, Instance(f.instance_id))
            if f.outcome and (inst.outcome is None or (from_report and not inst.outcome_from_report)):
                inst.outcome, inst.outcome_from_report = f.outcome, from_report
            if f.status:
                inst.statuses.append(f.status)
            inst.api_error |= f.api_error
            inst.early_stop |= f.early_stop
            inst.excluded |= f.already_infra and fd.kind == "wedgewatch results"
            if f.patch_empty is not None:
                inst.patch_empty = (
                    f.patch_empty if inst.patch_empty is None else inst.patch_empty or f.patch_empty
                )
        for s in fd.samples:
            out.setdefault(s.instance_id, Instance(s.instance_id)).durations.append(s.duration)
    return out


def scan(paths: list[Path], hints: list[float] | None = None) -> dict[str, Any]:
    """Everything ``wedgewatch scan`` prints, as a JSON-ready dict."""
    files = [read(p) for p in expand(paths)]
    timeouts = [cl.OPENAI_SDK_TIMEOUT, *(h for h in (hints or []) if h != cl.OPENAI_SDK_TIMEOUT)]
    instances = _merge(files)
    samples = [s for fd in files for s in fd.samples]
    found = cl.find_clusters([s.duration for s in samples])
    in_cluster: set[str] = set()
    for c in found:
        c.explanations = cl.explain(c.center, timeouts)
        # An attempt the file already counts as infrastructure (wedgewatch's api_error) was
        # retried: its place in a cluster says nothing against the instance's final outcome.
        in_cluster |= {samples[i].instance_id for i in c.members if not samples[i].already_infra}
    suspicious, resolved_with_evidence = [], []
    for inst in instances.values():
        kinds = {k for s in inst.statuses if (k := status_kind(s))}
        inst.evidence = [f"status:{k}" for k in sorted(kinds)]
        if inst.api_error:
            inst.evidence.append(API_ERROR)
        strong = bool(inst.evidence)
        if inst.instance_id in in_cluster:
            inst.evidence.append("cluster")
            strong = True
        match = next((m for d in inst.durations if (m := cl.hint_match(d, timeouts))), None)
        if match:
            inst.evidence.append(f"timeout_match:{match['tries']}x{match['timeout']:g}s")
        if inst.patch_empty:
            inst.evidence.append(EMPTY_PATCH)
        if not (strong or (match and (match["tries"] >= 2 or inst.patch_empty))):
            continue
        if inst.outcome == RESOLVED:
            resolved_with_evidence.append(inst)
        elif not inst.excluded:
            suspicious.append(inst)
    result: dict[str, Any] = {
        "files": [
            {
                "path": fd.path,
                "kind": fd.kind,
                "instances": len({f.instance_id for f in fd.facts}),
                "durations": len(fd.samples),
            }
            for fd in files
        ],
        "timeouts_considered": timeouts,
        "durations": _describe([s.duration for s in samples]),
        "clusters": [c.as_dict() for c in found],
        "suspicious": [_inst_dict(i) for i in suspicious],
        "resolved_with_evidence": [_inst_dict(i) for i in resolved_with_evidence],
        "excluded_by_file": sum(1 for i in instances.values() if i.excluded),
        "score": _score(files, instances, suspicious),
    }
    result["signature"] = bool(suspicious or found)
    result["verdict"] = verdict(result)
    return result


def _describe(ds: list[float]) -> dict[str, Any]:
    if not ds:
        return {"n": 0}
    return {"n": len(ds), "min": min(ds), "median": stats.median(ds), "max": max(ds)}


def _inst_dict(i: Instance) -> dict[str, Any]:
    return {
        "instance_id": i.instance_id,
        "outcome": i.outcome,
        "durations": [round(d, 3) for d in sorted(i.durations)],
        "status": "; ".join(dict.fromkeys(i.statuses))[:200],
        EMPTY_PATCH: i.patch_empty,
        "evidence": i.evidence,
    }


def _score(
    files: list[FileData], insts: dict[str, Instance], suspicious: list[Instance]
) -> dict[str, Any] | None:
    """The score as the files have it, and with the suspicious instances moved to infrastructure."""
    # Submitted is not graded yet: no score counts it either way.
    scored = [
        i
        for i in insts.values()
        if i.outcome is not None and not i.excluded and i.outcome not in (PENDING, SUBMITTED)
    ]
    if not scored:
        return None
    totals = [fd.total for fd in files if fd.total is not None]
    n = max([len(scored), *totals])  # a report's denominator counts instances without predictions
    k = sum(1 for i in scored if i.outcome == RESOLVED)
    moved = sum(1 for i in suspicious if i.outcome is not None)
    # What the file itself counts as the infrastructure's (wedgewatch's infra_failed), already out
    # of its score: shown beside it, as every summary shows infra_failed.
    apart = sum(1 for i in insts.values() if i.excluded and i.outcome == INFRA_FAILED)
    return {
        "as_scored": stats.rate(k, n),
        "infra_failed_in_file": apart,
        "infra_reclassified": moved,
        INFRA_FAILED: apart + moved,
        "reclassified": stats.rate(k, n - moved),
        "denominator_from_report": bool(totals) and max(totals) > len(scored),
    }


def verdict(r: dict[str, Any]) -> list[str]:
    if not r["signature"]:
        out = [
            "no timeout signature: no tight cluster of durations, and no unresolved instance whose "
            "status, flags or duration point at a client timeout or an API error."
        ]
        if not r["durations"]["n"]:
            out.append("These files carry no durations, so only statuses and flags were checked.")
        return out
    out = []
    for c in r["clusters"]:
        e = c["explanations"][0]
        reading = (
            f"{e['tries']} x {e['timeout']:g} s + {e['backoff']:g} s"
            if e["source"] != "unknown"
            else f"one deadline of about {e['timeout']:g} s"
        )
        others = [f"{x['tries']} x {x['timeout']:g} s" for x in c["explanations"][1:4]]
        out.append(
            f"{c['count']} durations within {c['spread']:g} s of each other around {c['center']:g} s "
            f"(chance under the run's own spread p = {c['p_value']:.2g}): {reading}"
            + (f" (or {', '.join(others)})" if others else "")
            + ", the signature of a client timeout."
        )
    n = len(r["suspicious"])
    s = r["score"]
    if n and s is not None:
        a, b = s["as_scored"], s["reclassified"]
        out.append(
            f"{n} unresolved instance(s) look like infrastructure failures scored as model failures. "
            f"Scored as the files have it: {rate_text(a)}; with them counted as infrastructure "
            f"({INFRA_FAILED} {s[INFRA_FAILED]}, beside the score): {rate_text(b)}."
        )
    elif n:
        out.append(
            f"{n} instance(s) look like infrastructure failures; no file here says which were "
            "resolved, so the score cannot be recomputed (add the evaluation report)."
        )
    else:
        out.append(
            "No unresolved instance is in a cluster or carries a timeout/API status: the score is unaffected."
        )
    empty = sum(1 for i in r["suspicious"] if i[EMPTY_PATCH])
    if empty:
        out.append(f"{empty} of them left an empty patch, as a hung agent does.")
    return out


def render_text(r: dict[str, Any]) -> str:
    lines = ["files:"]
    lines += table(
        ["file", "format", "instances", "durations"],
        [[f["path"], f["kind"], f["instances"], f["durations"]] for f in r["files"]],
    )
    d = r["durations"]
    if d["n"]:
        lines.append(
            f"durations: {d['n']}, {d['min']:.1f}–{d['max']:.1f} s (median {d['median']:.1f} s); "
            f"timeouts considered: {', '.join(f'{t:g} s' for t in r['timeouts_considered'])}"
        )
    if r["clusters"]:
        lines += ["", "clusters:"]
        lines += table(
            ["center s", "spread s", "count", "p", "k x T + b"],
            [
                [
                    c["center"],
                    c["spread"],
                    c["count"],
                    f"{c['p_value']:.2g}",
                    ", ".join(
                        f"{e['tries']}x{e['timeout']:g}+{e['backoff']:g}" for e in c["explanations"][:4]
                    ),
                ]
                for c in r["clusters"]
            ],
        )
    if r["suspicious"]:
        lines += ["", f"suspicious instances ({len(r['suspicious'])}):"]
        lines += table(
            ["instance", "outcome", "duration s", "evidence", "status"],
            [
                [
                    i["instance_id"],
                    i["outcome"],
                    ", ".join(f"{x:.1f}" for x in i["durations"]),
                    " ".join(i["evidence"]),
                    i["status"][:60],
                ]
                for i in r["suspicious"]
            ],
        )
    s = r["score"]
    if s is not None:
        apart = s["infra_failed_in_file"]
        lines += ["", "score:", f"  as scored:                      {rate_text(s['as_scored'])}"]
        if apart:
            lines[-1] += f"   {INFRA_FAILED} {apart} (the file's own, apart)"
        lines.append(
            f"  suspicious as infrastructure:   {rate_text(s['reclassified'])}"
            f"   {INFRA_FAILED} {s[INFRA_FAILED]} (change {_change(s)})"
        )
    return "\n".join([*lines, "", *r["verdict"]])


def _change(s: dict[str, Any]) -> str:
    a, b = s["as_scored"]["rate"], s["reclassified"]["rate"]
    return "n/a" if a is None or b is None else points(b - a)
