"""Readers for other harnesses' result files. Each turns a file into what ``scan`` needs:
timing samples (a duration and the status beside it) and per-instance facts (outcome, patch,
flags). The format is recognised by content, not by name.

Formats: SWE-bench evaluation reports (``resolved_ids``, ``unresolved_ids``, ...; and the
per-instance ``report.json``), SWE-bench predictions (JSONL or a JSON list), mini-swe-agent
trajectories (``info.exit_status``, messages with ``extra.timestamp``) and its ``preds.json``,
SWE-agent ``.traj`` files (same ``info``), wedgewatch's results export, and generic per-instance
JSONL/JSON/CSV with a duration-like and a status-like field.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from wedgewatch.analysis.scan import harness_formats, inspect_log
from wedgewatch.analysis.scan.records import Facts, FileData, Sample
from wedgewatch.base.errors import BadInput
from wedgewatch.base.vocab import (
    API_ERROR,
    EARLY_STOP,
    EMPTY_PATCH,
    INFRA_FAILED,
    OUTCOMES,
    PENDING,
    RESOLVED,
    RETRIED,
    SUBMITTED,
    UNRESOLVED,
)
from wedgewatch.wire import jsontext

__all__ = ["Facts", "FileData", "Sample", "expand", "read"]

DURATION_KEYS = (
    "duration",
    "duration_s",
    "duration_sec",
    "duration_seconds",
    "elapsed",
    "elapsed_s",
    "elapsed_seconds",
    "elapsed_time",
    "wall_time",
    "wall_clock",
    "wallclock",
    "wall_seconds",
    "runtime",
    "run_time",
    "time",
    "time_s",
    "seconds",
    "total_time",
    "total_seconds",
    "latency",
)
START_END_KEYS = (("start", "end"), ("started_at", "ended_at"), ("start_time", "end_time"))
STATUS_KEYS = (
    "exit_status",
    "status",
    "error",
    "error_type",
    "exception",
    "reason",
    "final_status",
    "final_reason",
    "stop_reason",
    "termination_reason",
)
TIMEOUT_FLAGS = ("timed_out", "is_timeout", "timeout")  # only as booleans: "timeout" may hold seconds
ID_KEYS = ("instance_id", "id", "task_id", "instance", "name")
REPORT_LISTS = {
    "resolved_ids": RESOLVED,
    "unresolved_ids": UNRESOLVED,
    "error_ids": "error",
    "empty_patch_ids": EMPTY_PATCH,
    "incomplete_ids": "incomplete",
}
REPORT_ID_KEYS = (*REPORT_LISTS, "completed_ids", "submitted_ids", "infra_failure_ids")
# mini-swe-agent's own limits: the agent stopped, not the server.
MINI_EARLY_STOPS = (
    "LimitsExceeded",
    "TimeExceeded",
    "RepeatedFormatError",
    "FormatError",
    "CostLimitExceeded",
)
VERDICT_WORDS = (RESOLVED, UNRESOLVED, SUBMITTED, EMPTY_PATCH, EARLY_STOP)
"""The words a harness writes for how an instance ended, in its ``outcome`` or its ``status``
(docs/wrap.md's harness verdicts): each is read as itself, in any case."""
OUTCOME_WORDS = (*OUTCOMES, SUBMITTED, "error")


def expand(paths: list[Path]) -> list[Path]:
    """Files to read: a directory stands for its trajectories and its preds.json."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(
                [*p.rglob("*.traj.json"), *p.rglob("*.traj"), *p.glob("preds.json"), *p.glob("*.eval")]
            )
            if not found:
                raise BadInput(f"{p}: a directory with no *.traj.json, *.traj, preds.json or *.eval")
            out += found
        else:
            out.append(p)
    return out


def read(path: Path) -> FileData:
    """Read one file; BadInput naming it when it cannot be read or its shape is unknown."""
    if path.suffix.lower() == ".eval":
        return inspect_log.read_eval(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's CSV often starts with a BOM
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    name = str(path)
    if not text.strip():
        raise BadInput(f"{path}: empty file")
    if path.suffix.lower() in (".csv", ".tsv"):
        dialect = "excel-tab" if path.suffix.lower() == ".tsv" else "excel"
        try:
            table = list(csv.DictReader(text.splitlines(), dialect=dialect))
        except csv.Error as exc:  # a field past csv's limit, a NUL byte
            raise BadInput(f"{path}: not readable as {path.suffix[1:].upper()}: {exc}") from None
        return _rows(name, table, "csv")
    try:
        data: Any = jsontext.loads(text)
    except json.JSONDecodeError:
        data = _jsonl(path, text)
        return _rows(name, data, "jsonl")
    if isinstance(data, list):
        return _rows(name, data, "json list")
    if isinstance(data, dict):
        return _object(name, path, data)
    raise BadInput(f"{path}: a JSON {type(data).__name__}, not a result file")


def _jsonl(path: Path, text: str) -> list[Any]:
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(jsontext.loads(line))
        except json.JSONDecodeError as exc:
            raise BadInput(f"{path}:{n}: neither JSON nor JSONL ({exc.msg})") from None
    return rows


def _object(name: str, path: Path, data: dict[str, Any]) -> FileData:
    if inspect_log.is_json_log(data):
        return inspect_log.from_samples(name, data["samples"])
    if harness_formats.is_harbor_trial(data):
        return harness_formats.harbor_trial(name, data)
    if any(k in data for k in REPORT_ID_KEYS):
        return _report(name, data)
    info = data.get("info")
    if isinstance(info, dict) and ("exit_status" in info or "messages" in data or "trajectory" in data):
        return _trajectory(name, path, data, info)
    values = list(data.values())
    if values and all(isinstance(v, dict) and "resolved" in v for v in values):
        fd = FileData(name, "swebench instance report")
        fd.facts = [
            Facts(str(k), name, outcome=RESOLVED if v["resolved"] else UNRESOLVED) for k, v in data.items()
        ]
        return fd
    if values and all(isinstance(v, dict) and "model_patch" in v for v in values):
        return _rows(name, [{"instance_id": k, **v} for k, v in data.items()], "predictions (preds.json)")
    for key in ("results", "instances", "records", "rows"):
        if isinstance(data.get(key), list):
            return _rows(name, data[key], f"json .{key}")
    raise BadInput(f"{path}: unknown JSON shape (keys: {', '.join(list(data)[:8])})")


def _report(name: str, data: dict[str, Any]) -> FileData:
    fd = FileData(name, "swebench report")
    seen: dict[str, Facts] = {}
    for key, outcome in REPORT_LISTS.items():
        ids = data.get(key) or []
        if not isinstance(ids, list):
            raise BadInput(f"{name}: field {key} is not a list")
        for iid in ids:
            f = seen.setdefault(str(iid), Facts(str(iid), name))
            if f.outcome is None:  # an id in two lists keeps the first (resolved before the rest)
                f.outcome = outcome
            if outcome == EMPTY_PATCH:
                f.patch_empty = True
    for iid in data.get("infra_failure_ids") or []:
        f = seen.setdefault(str(iid), Facts(str(iid), name))
        f.already_infra = True  # swebench >= 5 flags these, but keeps them in the denominator
    fd.facts = list(seen.values())
    total = data.get("total_instances")
    fd.total = int(total) if isinstance(total, int) else None
    return fd


def _trajectory(name: str, path: Path, data: dict[str, Any], info: dict[str, Any]) -> FileData:
    fname = path.name
    stem = (
        fname.removesuffix(".json").removesuffix(".traj")
        if fname.endswith((".traj.json", ".traj"))
        else path.stem
    )
    iid = str(data.get("instance_id") or info.get("instance_id") or stem)
    exit_status = str(info.get("exit_status") or "")
    status = " ".join(s for s in (exit_status, str(info.get("exception_str") or "")[:300]) if s)
    submission = info.get("submission")
    fd = FileData(
        name, "trajectory" + (f" ({data['trajectory_format']})" if "trajectory_format" in data else "")
    )
    facts = Facts(iid, name, status=status)
    facts.early_stop = exit_status in MINI_EARLY_STOPS
    if isinstance(submission, str) or submission is None:
        facts.patch_empty = not (submission or "").strip()
        if exit_status == "Submitted" and facts.patch_empty:
            facts.outcome = EMPTY_PATCH
    fd.facts = [facts]
    duration = _duration(info)
    if duration is None:
        duration = _message_span(data.get("messages") or data.get("history") or [])
    if duration is not None:
        fd.samples = [Sample(iid, duration, status, name)]
    return fd


def _message_span(messages: Any) -> float | None:
    """Seconds between the first and the last timestamped message: a lower bound on the
    instance's duration (a request that hung and failed left no message behind)."""
    stamps = []
    if isinstance(messages, list):
        for m in messages:
            if isinstance(m, dict):
                ts = (m.get("extra") or {}).get("timestamp") if isinstance(m.get("extra"), dict) else None
                ts = ts if ts is not None else m.get("timestamp")
                if isinstance(ts, int | float):
                    stamps.append(float(ts))
    return (max(stamps) - min(stamps)) if len(stamps) >= 2 else None


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        try:
            return jsontext.finite(float(v))  # NaN or infinite: no number (it printed as "nan-nan s")
        except OverflowError:  # an int past a float's range
            return None
    if isinstance(v, str):
        s = v.strip().lower().removesuffix("seconds").removesuffix("sec").removesuffix("s").strip()
        try:
            return jsontext.finite(float(s))
        except (ValueError, OverflowError):
            return None
    return None


def _duration(row: dict[str, Any]) -> float | None:
    for key in DURATION_KEYS:
        if key in row and (d := _number(row[key])) is not None:
            return d
    for a, b in START_END_KEYS:
        x, y = _number(row.get(a)), _number(row.get(b))
        if x is not None and y is not None:
            return y - x
    return None


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "y", "t")
    return bool(v)


def _word(v: Any) -> str | None:
    return v.strip().lower() if isinstance(v, str) else None


def _status(row: dict[str, Any]) -> str:
    parts = [key for key in TIMEOUT_FLAGS if row.get(key) is True or str(row.get(key)).lower() == "true"]
    for key in STATUS_KEYS:
        v = row.get(key)
        if isinstance(v, str) and v.strip():
            parts.append(v.strip()[:300])
        elif isinstance(v, dict):
            parts.append(json.dumps(v)[:300])
    return " ".join(parts)


def _rows(name: str, rows: list[Any], kind: str) -> FileData:
    if harness_formats.is_openhands(rows):
        return harness_formats.openhands_rows(name, rows)
    fd = FileData(name, kind)
    useful = False
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise BadInput(f"{name}: record {n} is not an object")
        if isinstance(row.get("attempts"), list) and "has_model_outcome" in row:
            fd.kind = "wedgewatch results"
            _wedgewatch_row(fd, row)
            useful = True
            continue
        iid = next((str(row[k]) for k in ID_KEYS if row.get(k) not in (None, "")), f"{Path(name).name}:{n}")
        facts = Facts(iid, name, status=_status(row))
        facts.api_error = _truthy(row.get(API_ERROR, False))
        facts.early_stop = _truthy(row.get(EARLY_STOP, False))
        outcome = _word(row.get("outcome"))
        if outcome in OUTCOME_WORDS:
            facts.outcome = outcome
        elif RESOLVED in row and row[RESOLVED] not in (None, ""):
            facts.outcome = RESOLVED if _truthy(row[RESOLVED]) else UNRESOLVED
        elif (status := _word(row.get("status"))) in VERDICT_WORDS:
            facts.outcome = status  # many harnesses put the verdict in status
        facts.early_stop |= facts.outcome == EARLY_STOP
        if "model_patch" in row:
            facts.patch_empty = not str(row["model_patch"] or "").strip()
        duration = _duration(row)
        if duration is not None:
            fd.samples.append(Sample(iid, duration, facts.status, name))
        useful = useful or bool(
            duration is not None
            or facts.status
            or facts.outcome
            or facts.patch_empty is not None
            or API_ERROR in row
            or EARLY_STOP in row
        )
        fd.facts.append(facts)
    if kind in ("jsonl", "json list") and not fd.samples and all(f.patch_empty is not None for f in fd.facts):
        fd.kind = "predictions"
    if not useful:
        raise BadInput(
            f"{name}: no duration-like ({', '.join(DURATION_KEYS[:5])}, ...), status-like "
            f"({', '.join(STATUS_KEYS[:4])}, ...) or outcome field in any record"
        )
    return fd


def _wedgewatch_row(fd: FileData, row: dict[str, Any]) -> None:
    iid = str(row["instance_id"])
    fd.facts.append(
        Facts(
            iid,
            fd.path,
            outcome=row.get("outcome"),
            status=f"{row.get('final_status') or ''} {row.get('final_reason') or ''}".strip(),
            # An api_error attempt was retried in a fresh sandbox: the final outcome stands on
            # its own, so the flag is no evidence against it here.
            api_error=False,
            early_stop=bool(row.get(EARLY_STOP)),
            already_infra=row.get("outcome") in (INFRA_FAILED, PENDING),
        )
    )
    for a in row["attempts"]:
        if isinstance(a, dict) and (d := _number(a.get("duration"))) is not None:
            status = f"{a.get('status', '')}:{a.get('reason', '')}".strip(":")
            infra = a.get("status") in RETRIED
            fd.samples.append(Sample(iid, d, status, fd.path, already_infra=infra))
