"""Inspect AI eval logs: the ``.eval`` zip (``header.json``, one ``samples/<id>_epoch_<n>.json``
per sample) and the ``--log-format json`` file (``{"eval": ..., "samples": [...]}``), read as
Inspect documents them and as ``inspect eval`` 0.3.285 wrote them in our tests.

Per sample: its id, its first score (``C``/``I`` or a number: resolved when correct or 1), its
error (an errored sample has no verdict of the model's), ``total_time`` and its messages.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

from wedgewatch.analysis.scan.records import Facts, FileData, Sample
from wedgewatch.base.errors import BadInput
from wedgewatch.base.vocab import RESOLVED, UNRESOLVED
from wedgewatch.wire import jsontext

CORRECT = ("C", 1, 1.0, True)


def _open_member(z: zipfile.ZipFile, name: str, path: Path) -> Any:
    try:
        data = z.read(name)
    except NotImplementedError:
        # Inspect compresses with zstd; zipfile reads it once zipfile-zstd (an inspect-ai
        # dependency) has registered the method.
        try:
            import zipfile_zstd  # type: ignore[import-not-found, import-untyped, unused-ignore]  # noqa: F401
        except ImportError:
            raise BadInput(
                f"{path}: an Inspect .eval log compressed with zstd; install inspect-ai (or "
                "zipfile-zstd) to read it, or write the log with --log-format json"
            ) from None
        data = z.read(name)
    try:
        return jsontext.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: {name} in this .eval log is not JSON ({exc})") from None


def read_eval(path: Path) -> FileData:
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            if "header.json" not in names:
                raise BadInput(f"{path}: a zip without header.json, not an Inspect .eval log")
            samples = [
                _open_member(z, n, path) for n in names if n.startswith("samples/") and n.endswith(".json")
            ]
    except zipfile.BadZipFile:
        raise BadInput(f"{path}: not a zip file (an Inspect .eval log is one)") from None
    return from_samples(str(path), samples)


def is_json_log(data: dict[str, Any]) -> bool:
    return isinstance(data.get("eval"), dict) and isinstance(data.get("samples"), list)


def from_samples(name: str, samples: list[Any]) -> FileData:
    fd = FileData(name, "inspect log")
    for s in samples:
        if not isinstance(s, dict) or "id" not in s:
            raise BadInput(f"{name}: a sample without an id")
        iid = str(s["id"])
        facts = Facts(iid, name)
        error = s.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else str(error)
            facts.status = "SampleError " + str(message).splitlines()[0][:300] if message else "SampleError"
            facts.api_error = True
        else:
            scores = s.get("scores") or {}
            first = next(iter(scores.values()), None) if isinstance(scores, dict) else None
            value = first.get("value") if isinstance(first, dict) else None
            if value is not None:
                facts.outcome = RESOLVED if value in CORRECT else UNRESOLVED
        fd.facts.append(facts)
        total = s.get("total_time")
        if isinstance(total, int | float):
            fd.samples.append(Sample(iid, float(total), facts.status, name))
        messages = s.get("messages")
        if isinstance(messages, list):
            fd.messages[iid] = messages
    return fd
