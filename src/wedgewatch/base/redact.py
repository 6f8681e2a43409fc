"""Every secret scrubbing in one place: what may be recorded of an argv, a log excerpt or a
detail dict. The ledger, the supervisor's records and its error messages all pass through here,
so an API key never reaches a row, a log line or a report."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

SECRET_KEYS = frozenset({"authorization", "api_key", "api-key", "x-api-key", "openai_api_key"})
"""Keys whose values never reach the ledger, whatever a caller puts in a detail dict."""

_SECRET_FLAG = re.compile(r"(api[-_]?key|token|secret|password)", re.IGNORECASE)
_SECRET_TEXT = re.compile(
    r"""((?<![a-z])(?:api[-_]?key|token|secret|password|authorization)(?![a-z0-9])['"]?\s*[:=]?\s*"""
    r"""(?:bearer\s+)?['"]?)[^\s'",}]+""",
    re.IGNORECASE,
)


def argv(args: list[str]) -> list[str]:
    """argv as it may be recorded: the value of any key/token/secret flag replaced."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        if arg.startswith("-") and _SECRET_FLAG.search(arg) and "file" not in arg.lower():
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=***")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def text(value: str) -> str:
    """A log excerpt as it may be recorded or shown: values after key/token words masked
    (vLLM, for one, logs its non-default arguments, ``api_key`` included)."""
    return _SECRET_TEXT.sub(r"\1***", value)


def data(value: Any) -> Any:
    """A JSON-ready value with every ``SECRET_KEYS`` entry dropped, at any depth."""
    if isinstance(value, Mapping):
        return {k: data(v) for k, v in value.items() if str(k).lower() not in SECRET_KEYS}
    if isinstance(value, list | tuple):
        return [data(v) for v in value]
    return value


def url(value: str) -> str:
    """A ledger string as it may be shown: a URL's password masked (``user:***@host``), so a
    message still says that a password was given and where."""
    return _without_password(value, ":***@")


def stored_url(value: str) -> str:
    """A ledger string as it may be stored (a config snapshot in the ledger, the config sent to
    Ray's workers): a URL's password removed, so whoever reads it back connects with their own
    (``PGPASSWORD``, ``~/.pgpass``); a masked one would be sent as the password."""
    return _without_password(value, "@")


def _without_password(value: str, replacement: str) -> str:
    if "://" not in value:
        return value  # a file path
    try:
        password = urlsplit(value).password
    except ValueError:
        return "<unparsable URL>"
    if password is None:
        return value
    return value.replace(f":{password}@", replacement, 1)
