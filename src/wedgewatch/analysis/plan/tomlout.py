"""Run configs written as TOML with ``tomli-w``: the standard library reads TOML but does not
write it, and a hand-rolled writer escaped characters outside the Basic Multilingual Plane as
JSON surrogate pairs, which ``tomllib`` rejects."""

from __future__ import annotations

from typing import Any

import tomli_w


def _drop_none(node: Any) -> Any:
    # TOML has no null: a None value is left out, so the config's default applies.
    if isinstance(node, dict):
        return {k: _drop_none(v) for k, v in node.items() if v is not None}
    if isinstance(node, list | tuple):
        return [_drop_none(v) for v in node if v is not None]
    return node


def dumps(data: dict[str, Any], header: str = "") -> str:
    """``data`` as TOML, under ``header`` as comment lines; None values are left out."""
    lines = [f"# {h}" if h else "#" for h in header.splitlines()] if header else []
    body = tomli_w.dumps(_drop_none(data))
    return ("\n".join(lines) + "\n\n" if lines else "") + body
