"""Loading a suite: SWE-bench JSONL, JSON lists or parquet, a Hugging Face dataset, or the bundled
suite; then the instance filter (ids, regex, slice).

Every problem is a ``SuiteError`` on one line naming the file and line (or the dataset and row),
raised before the runner writes anything, so a bad suite never leaves half a run in the ledger.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import SuiteError
from wedgewatch.config import SuiteConfig
from wedgewatch.wire import jsontext

log = logging.getLogger(__name__)

# Without these an instance cannot be attempted (a sandbox needs repo and base_commit).
REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement")
# SWE-bench stores these two as JSON strings inside the record; we keep lists.
TEST_LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")
# Present in every SWE-bench record; empty when a suite lacks them (no evaluation possible then).
OPTIONAL_TEXT = ("patch", "test_patch", "hints_text", "version", "environment_setup_commit")


@dataclass(frozen=True, slots=True)
class Suite:
    """The instances of a run, in order, and where they came from (``runs.suite``)."""

    source: str
    instances: list[dict[str, Any]]

    @property
    def ids(self) -> list[str]:
        return [str(i["instance_id"]) for i in self.instances]


def normalise(record: Any, where: str) -> dict[str, Any]:
    """Check one raw record and return it in the runner's shape (test lists as lists)."""
    if not isinstance(record, dict):
        raise SuiteError(f"{where}: expected a JSON object, got {type(record).__name__}")
    missing = [k for k in REQUIRED if not record.get(k)]
    if missing:
        raise SuiteError(f"{where}: missing field(s) {', '.join(missing)}")
    out = dict(record)
    out["instance_id"] = str(record["instance_id"])
    for key in TEST_LISTS:
        value = record.get(key, [])
        if isinstance(value, str):
            try:
                value = jsontext.loads(value) if value.strip() else []
            except json.JSONDecodeError as exc:
                raise SuiteError(f"{where}: {key} is a string but not a JSON list: {exc.msg}") from None
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise SuiteError(f"{where}: {key} must be a list of test ids")
        out[key] = value
    for key in OPTIONAL_TEXT:
        value = record.get(key)
        if value is not None and not isinstance(value, str):
            raise SuiteError(f"{where}: {key} must be a string")
        out.setdefault(key, "")
        if out[key] is None:
            out[key] = ""
    return out


def _dedupe(records: Iterable[tuple[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for where, raw in records:
        inst = normalise(raw, where)
        iid = inst["instance_id"]
        if iid in seen:
            raise SuiteError(f"{where}: duplicate instance_id {iid!r} (first at {seen[iid]})")
        seen[iid] = where
        out.append(inst)
    return out


def _jsonl_records(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            yield where, jsontext.loads(line)
        except json.JSONDecodeError as exc:
            raise SuiteError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None


def load_parquet(p: Path) -> list[dict[str, Any]]:
    """A parquet file as the SWE-bench datasets publish them (one row per instance)."""
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError:
        raise SuiteError(f"{p}: reading parquet needs `pyarrow` (it comes with `datasets`)") from None
    try:
        rows = pq.read_table(p).to_pylist()
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise SuiteError(f"{p}: not a readable parquet file: {str(exc).splitlines()[0]}") from None
    return _dedupe((f"{p}: row {n}", rec) for n, rec in enumerate(rows))


def load_file(path: str | Path) -> list[dict[str, Any]]:
    """A SWE-bench JSONL file (one instance per line), a JSON file holding a list of instances, or
    a parquet file (``.parquet``, as the Hugging Face datasets store them)."""
    p = Path(path)
    if p.suffix == ".parquet":
        if not p.is_file():
            raise SuiteError(f"{p}: no such file")
        return load_parquet(p)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SuiteError(f"{p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if p.suffix == ".json" or (p.suffix != ".jsonl" and text.lstrip().startswith("[")):
        try:
            data = jsontext.loads(text)
        except json.JSONDecodeError as exc:
            raise SuiteError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(data, list):
            raise SuiteError(f"{p}: a JSON suite must be a list of instances")
        return _dedupe((f"{p}: item {n}", rec) for n, rec in enumerate(data))
    return _dedupe(_jsonl_records(p, text))


def load_dataset(name: str, split: str) -> list[dict[str, Any]]:
    """A Hugging Face dataset: a hub name (``princeton-nlp/SWE-bench_Lite``) or a directory
    written by ``Dataset.save_to_disk``. Any failure, offline included, is one SuiteError."""
    try:
        import datasets  # type: ignore[import-untyped]
    except ImportError:
        raise SuiteError(f"suite.dataset {name!r}: the `datasets` package is not installed") from None
    try:
        if Path(name).is_dir():
            loaded: Any = datasets.load_from_disk(name)
            if isinstance(loaded, datasets.DatasetDict):
                loaded = loaded[split]
        else:
            loaded = datasets.load_dataset(name, split=split)
        rows = list(loaded)
    except Exception as exc:  # the hub client raises many kinds; all mean "cannot load"
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SuiteError(f"suite.dataset {name!r} (split {split!r}): cannot load: {msg}") from None
    return _dedupe((f"{name}[{split}] row {n}", rec) for n, rec in enumerate(rows))


def load_bundled() -> list[dict[str, Any]]:
    """The suite shipped in the package (wedgewatch.suites), used when no path or dataset is set."""
    try:
        from wedgewatch.suites import load_bundled as _load
    except ImportError as exc:
        raise SuiteError(f"the bundled suite is not available: {exc}") from None
    return _dedupe((f"bundled suite item {n}", dict(rec)) for n, rec in enumerate(_load()))


def parse_slice(text: str) -> slice:
    """``"0:20"``, ``"5:"``, ``"::2"`` or ``"7"`` (the first seven)."""
    parts = text.split(":")
    try:
        nums = [int(p) if p.strip() else None for p in parts]
    except ValueError:
        raise SuiteError(f"suite.slice: {text!r} is not a slice like 0:20") from None
    if len(nums) == 1:
        return slice(nums[0])
    if len(nums) > 3:
        raise SuiteError(f"suite.slice: {text!r} is not a slice like 0:20")
    return slice(*nums)


def apply_filter(instances: list[dict[str, Any]], cfg: SuiteConfig) -> list[dict[str, Any]]:
    """ids (in the suite's order; an unknown id is an error), then regex, then slice."""
    out = instances
    if cfg.ids:
        known = {i["instance_id"] for i in instances}
        unknown = [i for i in cfg.ids if i not in known]
        if unknown:
            raise SuiteError(f"suite.ids: not in the suite: {', '.join(unknown[:5])}")
        wanted = set(cfg.ids)
        out = [i for i in out if i["instance_id"] in wanted]
    if cfg.regex:
        try:
            pattern = re.compile(cfg.regex)
        except re.error as exc:
            raise SuiteError(f"suite.regex: {cfg.regex!r} is not a regular expression: {exc}") from None
        out = [i for i in out if pattern.search(i["instance_id"])]
    if cfg.slice:
        out = out[parse_slice(cfg.slice)]
    if not out:
        raise SuiteError("suite: no instance left after the filter (ids, regex, slice)")
    return out


def load_suite(cfg: SuiteConfig, base_dir: Path | None = None) -> Suite:
    """Load and filter the configured suite. ``base_dir`` resolves a relative ``path`` (the
    config file's directory)."""
    if cfg.path and cfg.dataset:
        raise SuiteError("suite: set path or dataset, not both")
    if cfg.path:
        p = Path(cfg.path)
        if base_dir is not None and not p.is_absolute():
            p = base_dir / p
        if not p.exists():
            raise SuiteError(f"suite.path: {p}: no such file")  # the setting, not only the file
        source, instances = str(p), load_file(p)
    elif cfg.dataset:
        source, instances = f"{cfg.dataset}[{cfg.split}]", load_dataset(cfg.dataset, cfg.split)
    else:
        source, instances = "bundled", load_bundled()
    if not instances:
        raise SuiteError(f"{source}: the suite has no instances")
    chosen = apply_filter(instances, cfg)
    log.info("suite %s: %d of %d instances", source, len(chosen), len(instances))
    return Suite(source=source, instances=chosen)
