"""What differs between two runs' configurations, factor by factor, and the sentence that says a
difference between them cannot be pinned on any one factor when several changed at once.

The story's one clean-looking comparison changed two things together (a fresh server *and* a
warm-up): a score difference there belongs to both. The diff reads the config snapshots the
ledger keeps (``runs.config_json``), the wedgewatch version, and the first server life (adopted
or started), so nothing outside the two ledgers is needed.
"""

from __future__ import annotations

import json
from typing import Any

from wedgewatch.base.vocab import ADOPTED
from wedgewatch.config import server_of
from wedgewatch.ledger.store import Ledger

# Fields that name where things are kept, not how the run was made: they differ between any two
# runs and change nothing a score depends on.
BOOKKEEPING = frozenset(
    {"run.ledger", "run.workdir", "server.log_dir", "server.port", "run.keep_sandboxes", "run.model_name"}
)
# Plain names for the factors the story (and plan) talk about; any other field keeps its dotted name.
LABELS = {
    "server.fresh": "fresh",
    "server.warmup.count": "warm-up",
    "run.concurrency": "concurrency",
    "server.model": "model",
    "server.served_model_name": "served model name",
    "agent.model": "model the agent requests",
    "server.lora_modules": "adapters (server.lora_modules)",
    "server.arg_sets": "server flags (arg sets)",
    "server.profile": "server profile",
    "agent.name": "agent",
    "run.attempts": "attempts per instance",
    "tool_version": "wedgewatch version",
    "server_age_at_start": "server age at start",
}
# Fields that are deadlines, named as such so a reader sees the class of factor.
DEADLINES = (
    "watchdog.",
    "agent.timeout",
    "agent.client_timeout",
    "run.eval_timeout",
    "server.canary_timeout",
)
PRELOAD = "--preload-age"


def _flags(args: list[Any]) -> dict[str, Any]:
    """``--flag value`` / ``--flag=value`` / ``--switch`` pairs of a server's extra args."""
    out: dict[str, Any] = {}
    items = [str(a) for a in args]
    i = 0
    while i < len(items):
        a = items[i]
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            out[k] = v
        elif a.startswith("-"):
            nxt = items[i + 1] if i + 1 < len(items) else None
            if nxt is not None and not nxt.startswith("-"):
                out[a] = nxt
                i += 1
            else:
                out[a] = "present"
        else:
            out[f"arg {a}"] = "present"  # a positional: there or not
        i += 1
    return out


def flatten(snap: dict[str, Any]) -> dict[str, Any]:
    """A config snapshot as ``dotted.field -> value``; each server flag in ``server.args`` is a
    field of its own (``server flag --enforce-eager``), so a diff names the flag, not the list."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict) and (prefix != "server.lora_modules" and prefix != "server.env"):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif prefix == "server.args":
            flags = _flags(node or [])
            for k, v in flags.items():
                if k != PRELOAD:
                    out[f"server flag {k}"] = v
        else:
            out[prefix] = node

    walk("", snap)
    if isinstance(out.get("server.env"), dict):
        out["server.env"] = sorted(out["server.env"])  # names only: values may be keys
    return out


def server_age_at_start(snap: dict[str, Any], first_start_reason: str | None) -> str:
    """How used the server was when the run began: the simulator's preloaded age, an adopted
    server of unknown age, or a server the run started itself."""
    args = server_of(snap).get("args", [])
    preload = _flags(args).get(PRELOAD)
    if preload not in (None, True, "0"):
        return f"{preload} requests (simulated)"
    if first_start_reason == ADOPTED:
        return "adopted, age unknown"
    if first_start_reason is None:
        return "no server life"
    return "0 (started by the run)"


def label(field: str) -> str:
    if field in LABELS:
        return LABELS[field]
    if field.startswith("server.warmup."):
        return f"warm-up {field.rsplit('.', 1)[1]}"
    if field.startswith(DEADLINES):
        return f"deadline {field}"
    return field


def run_facts(ledger: Ledger, run_id: str) -> dict[str, Any]:
    """The flattened snapshot of one run plus its version and its server's age at start."""
    row = ledger.query("SELECT config_json, tool_version FROM runs WHERE run_id = ?", (run_id,))[0]
    snap = json.loads(row["config_json"])
    first = ledger.query(
        "SELECT start_reason FROM server_lives WHERE run_id = ? ORDER BY started_at LIMIT 1", (run_id,)
    )
    facts = flatten(snap)
    facts["tool_version"] = row["tool_version"]
    facts["server_age_at_start"] = server_age_at_start(snap, first[0][0] if first else None)
    return facts


def diff(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Every factor whose value differs, in a stable order: ``{factor, field, a, b}`` (a value a
    run does not have is None)."""
    out = []
    for f in sorted(set(a) | set(b)):
        if f in BOOKKEEPING:
            continue
        va, vb = a.get(f), b.get(f)
        if va != vb:
            out.append({"factor": label(f), "field": f, "a": va, "b": vb})
    return out


def _value_text(field: str, v: Any) -> str:
    if v is None:
        return "absent" if field.startswith("server flag") else "unset"
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v) if isinstance(v, list | dict) else str(v)


def sentence(differences: list[dict[str, Any]]) -> str | None:
    """When more than one factor differs: the plain sentence that names them all."""
    if len(differences) < 2:
        return None
    names = [d["factor"] for d in differences]
    listed = ", ".join(names[:-1]) + f" and {names[-1]}"
    return (
        f"The two runs differ in {len(names)} factors at once ({listed}): a difference between them "
        "cannot be attributed to any one of them."
    )


def render_rows(differences: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [d["factor"], _value_text(d["field"], d["a"]), _value_text(d["field"], d["b"])] for d in differences
    ]


__all__ = ["diff", "flatten", "label", "render_rows", "run_facts", "sentence", "server_age_at_start"]
