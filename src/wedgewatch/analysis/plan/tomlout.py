"""A small TOML writer for run configs (tables of scalars, lists of scalars, sub-tables): the
standard library reads TOML but does not write it, and a config needs nothing more."""

from __future__ import annotations

import json
import math
import re
from typing import Any

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _key(k: str) -> str:
    return k if _BARE.fullmatch(k) else json.dumps(k)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"TOML: {v} cannot be written")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string accepts JSON's escapes
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items() if x is not None) + "}"
    raise ValueError(f"TOML: cannot write a {type(v).__name__}")


def dumps(data: dict[str, Any], header: str = "") -> str:
    """``data`` as TOML; None values are left out (TOML has no null: the default applies)."""
    lines = [f"# {h}" if h else "#" for h in header.splitlines()] if header else []

    def table(prefix: str, node: dict[str, Any]) -> None:
        simple = [(k, v) for k, v in node.items() if v is not None and not isinstance(v, dict)]
        subs = [(k, v) for k, v in node.items() if isinstance(v, dict)]
        if prefix and (simple or not subs):
            if lines:
                lines.append("")
            lines.append(f"[{prefix}]")
        lines.extend(f"{_key(k)} = {_value(v)}" for k, v in simple)
        for k, v in subs:
            table(f"{prefix}.{_key(k)}" if prefix else _key(k), v)

    table("", data)
    return "\n".join(lines) + "\n"
