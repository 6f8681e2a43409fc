"""Every secret scrubbing in one place: what may be recorded of an argv, a log excerpt, a detail
dict or a config snapshot, and the ``Scrubber`` a server's output passes through on its way to
its log. The ledger, the supervisor's records, its logs and its error messages all pass through
here, so an API key never reaches a row, a log line or a report."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

MASK = "***"
"""What a secret is replaced with wherever it would have been written."""

MIN_SECRET = 4
"""Shorter values are not scrubbed from log text by value: masking every "1" of a log would
destroy it, and so short a value is no secret. The patterns below still mask them after a key word."""

SECRET_KEYS = frozenset({"authorization", "api_key", "api-key", "x-api-key", "openai_api_key"})
"""Keys whose values never reach the ledger, whatever a caller puts in a detail dict."""

_SECRET_FLAG = re.compile(r"(api[-_]?key|token|secret|password)", re.IGNORECASE)
_SECRET_TEXT = re.compile(
    r"""((?<![a-z])(?:api[-_]?key|token|secret|password|authorization)(?![a-z0-9])['"]?\s*[:=]?\s*"""
    r"""(?:bearer\s+)?[\['"]*)[^\s'",}\]]+""",
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(r"(://[^/\s:@]*:)[^/\s@]+@")
"""``scheme://user:password@host`` in free text (a PostgreSQL URL in an error message)."""


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
    return _URL_PASSWORD.sub(r"\1***@", _SECRET_TEXT.sub(r"\1***", value))


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


def config(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """A config snapshot as it may be stored (the ledger's ``config_json``): in every list of
    strings (``[server] args``, ``command``, ``restart_hook``, ``[agent] command``, ...) the value
    after a key/token/secret/password flag masked, every value of an ``env`` table masked (its
    names kept: the record still says which variables were set), a URL's password masked. A
    resumed run gets them back from its config file (``with_secrets``)."""
    out = _config(dict(snapshot), "")
    assert isinstance(out, dict)
    return out


def _config(value: Any, key: str) -> Any:
    if isinstance(value, Mapping):
        if key == "env":
            return {k: MASK for k in value}
        return {k: _config(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return [url(v) for v in argv(value)]
        return [_config(v, key) for v in value]
    if isinstance(value, str):
        return url(value)
    return value


def masked(value: Any, path: str = "") -> str | None:
    """The path of the first value ``config`` masked in a stored snapshot (``server.env.HF_TOKEN``),
    or None when it holds none."""
    if isinstance(value, Mapping):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return path if isinstance(value, str) and MASK in value else None
    for k, v in items:
        found = masked(v, f"{path}.{k}" if path else str(k))
        if found is not None:
            return found
    return None


def unmask(stored: Any, given: Any) -> Any:
    """``stored`` (a snapshot ``config`` masked) with each masked value taken from ``given``, the
    same settings as written (same shape: their hashes matched)."""
    if isinstance(stored, Mapping) and isinstance(given, Mapping):
        return {k: unmask(v, given[k]) if k in given else v for k, v in stored.items()}
    if isinstance(stored, list) and isinstance(given, list) and len(stored) == len(given):
        return [unmask(s, g) for s, g in zip(stored, given, strict=True)]
    if isinstance(stored, str) and MASK in stored:
        return given
    return stored


ENV_SECRET = 8
"""An ``env`` value whose name does not say it is a secret is scrubbed from logs from this length
on: the config snapshot masks every env value, and a log line must not show what the snapshot
hid; a shorter one (``0``, ``auto``, ``fp16``) would mask harmless text everywhere it appears."""


def secret_values(args: Iterable[str], env: Mapping[str, str]) -> list[str]:
    """The literal secrets of a server's settings, for its ``Scrubber``: each value after a
    key/token/secret/password flag, every ``env`` value whose name says it is one (HF_TOKEN,
    VLLM_API_KEY, ...) and every other of ``ENV_SECRET`` characters or more, and the passwords of
    URLs among them."""
    args = list(args)
    shown = argv(args)
    found = [a.split("=", 1)[1] if "=" in a else a for a, s in zip(args, shown, strict=True) if a != s]
    named = [v for k, v in env.items() if _SECRET_FLAG.search(k) or _SECRET_NAME.search(k)]
    found += named + [v for v in env.values() if len(v) >= ENV_SECRET and v not in named]
    for a in [*args, *env.values()]:
        if "://" in a:
            try:
                password = urlsplit(a).password
            except ValueError:
                continue
            if password:
                found.append(password)
    return [v for v in found if len(v) >= MIN_SECRET]


_SECRET_NAME = re.compile(r"(pass|credential|auth|private)", re.IGNORECASE)


class Scrubber:
    """Masks the known secret values of one server (``secret_values``), and whatever the
    patterns of ``text`` catch, in the lines it prints; bytes in, bytes out, so undecodable
    output passes unchanged."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        vals = sorted({v for v in values if len(v) >= MIN_SECRET}, key=len, reverse=True)
        self._values = re.compile("|".join(re.escape(v) for v in vals)) if vals else None

    def text(self, value: str) -> str:
        if self._values is not None:
            value = self._values.sub(MASK, value)
        return text(value)

    def line(self, raw: bytes) -> bytes:
        # surrogateescape: bytes that are not UTF-8 go through the str patterns and back unchanged.
        return self.text(raw.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
