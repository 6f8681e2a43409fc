"""What each instance's requests must contain: content hashes from the suite's problem statements
and from the harness's own trajectories, hashed by ``wedgewatch.wire.fingerprint`` exactly as the proxy
hashed each request. Only *distinctive* hashes attribute: those found in one instance's
signature and no other's, so boilerplate every prompt shares (system prompt, instructions, the
same tool output in a shared directory) never decides anything.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import BadInput
from wedgewatch.wire import fingerprint, jsontext


def suite_statements(path: Path) -> dict[str, str]:
    """instance_id -> problem_statement from a JSON list, JSONL, or a directory of them (the
    form mini-swe-agent's ``--subset DIR`` loads)."""
    files = sorted([*path.glob("*.jsonl"), *path.glob("*.json")]) if path.is_dir() else [path]
    if not files:
        raise BadInput(f"--suite: {path} holds no .json or .jsonl file")
    out: dict[str, str] = {}
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"--suite: cannot read {f}: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            data: Any = jsontext.loads(text)
            rows = data if isinstance(data, list) else [data]
        except json.JSONDecodeError:
            try:
                rows = [jsontext.loads(line) for line in text.splitlines() if line.strip()]
            except json.JSONDecodeError as exc:
                raise BadInput(f"--suite: {f}: neither JSON nor JSONL ({exc.msg})") from None
        for n, row in enumerate(rows, 1):
            if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
                raise BadInput(f"--suite: {f}: record {n} has no instance_id")
            statement = row.get("problem_statement") or row.get("input") or ""
            out[row["instance_id"]] = statement if isinstance(statement, str) else json.dumps(statement)
    return out


class _Owned:
    """instance_id -> hashes, and the one instance each distinctive hash belongs to."""

    def __init__(self) -> None:
        self.by_instance: dict[str, set[str]] = {}
        self._owner: dict[str, str] | None = None

    def add(self, instance_id: str, hashes: Iterable[str]) -> None:
        self.by_instance.setdefault(instance_id, set()).update(hashes)
        self._owner = None

    def hits(self, hashes: Iterable[Any]) -> dict[str, int]:
        if self._owner is None:
            count = Counter(h for hs in self.by_instance.values() for h in hs)
            self._owner = {h: iid for iid, hs in self.by_instance.items() for h in hs if count[h] == 1}
        out: Counter[str] = Counter()
        for h in set(hashes):
            iid = self._owner.get(h) if isinstance(h, str) else None
            if iid is not None:
                out[iid] += 1
        return dict(out)


class Signatures:
    """Two tiers. Prompt lines (the problem statement, the harness's first messages) name an
    instance; whole-message hashes (tool outputs, the model's turns, from trajectories) are
    weaker (two instances in one shared directory see the same ``ls``), so they decide only a
    request whose prompt lines match no instance."""

    def __init__(self) -> None:
        self.lines = _Owned()
        self.messages = _Owned()

    def add_statement(self, instance_id: str, text: str) -> None:
        self.lines.add(instance_id, fingerprint.line_hashes(text, limit=10_000))

    def add_messages(self, instance_id: str, messages: list[Any]) -> None:
        fp = fingerprint.of_messages(messages)
        self.lines.add(instance_id, fp["lines"])
        self.messages.add(instance_id, fp["messages"])

    def match(self, fp: dict[str, Any]) -> dict[str, int]:
        """Instances whose distinctive hashes the request's fingerprints contain, with how many:
        by prompt lines, or (when those match none) by whole messages."""
        hits = self.lines.hits(fp.get("lines", []))
        return hits or self.messages.hits(fp.get("messages", []))
