"""A whole config file: its sections as one ``Config``, its snapshot and hash for the ledger, and
``load_config``, which turns any problem into one ``ConfigError`` naming the file and the field."""

from __future__ import annotations

import difflib
import hashlib
import json
import tomllib
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, ValidationError, model_validator

from wedgewatch.base import redact
from wedgewatch.base.errors import ConfigError
from wedgewatch.config.run import AgentConfig, RunConfig, SandboxConfig, SuiteConfig, WatchdogConfig
from wedgewatch.config.section import Section as _Section
from wedgewatch.config.server import ServerConfig


class Config(_Section):
    """A whole run or supervised-server configuration."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    """The inference server and its supervision."""
    servers: list[ServerConfig] = Field(default_factory=list)
    """A pool of servers (`[[servers]]`, one table per member: one per GPU or host), each with
    its own lives, wedge detection, restarts and budget, behind the one proxy. Empty: the one
    `[server]`. Not both."""
    watchdog: WatchdogConfig = Field(default_factory=WatchdogConfig)
    """The proxy's deadlines."""
    agent: AgentConfig = Field(default_factory=AgentConfig)
    """The agent."""
    suite: SuiteConfig = Field(default_factory=SuiteConfig)
    """The instances."""
    run: RunConfig = Field(default_factory=RunConfig)
    """The run itself."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """Where the agents' commands and the evaluations run."""

    @model_validator(mode="after")
    def _one_server_form(self) -> Config:
        if not self.servers:
            return self
        if "server" in self.model_fields_set:
            raise ValueError("set [server] or [[servers]] (a pool), not both")
        names = [m.name or f"s{i}" for i, m in enumerate(self.servers)]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"[[servers]] names must differ: {', '.join(twice)} is used twice")
        return self

    def members(self) -> list[ServerConfig]:
        """The servers of the run, each with its name: the pool's members, or the one
        ``[server]`` (whose name stays unset)."""
        if not self.servers:
            return [self.server]
        return [m.model_copy(update={"name": m.name or f"s{i}"}) for i, m in enumerate(self.servers)]

    def snapshot(self) -> dict[str, Any]:
        """Every setting as it may be written (the ledger's config snapshot, its hash): ``settings``
        with every secret masked (``redact.config``: values after key/token flags, ``env``
        values, URL passwords). A resume gets them back from the config file (``with_secrets``)."""
        return redact.config(self.settings())

    def settings(self) -> dict[str, Any]:
        """Every setting, secrets included: what the effective config is built from, never
        written. An "auto" that depends on which windows the file sets is pinned here,
        because a config rebuilt from this dump (a resume, the effective config) sets them all."""
        data = self.model_dump(mode="json")
        for cfg, dumped in zip([self.server, *self.servers], [data["server"], *data["servers"]], strict=True):
            if cfg.detection == "auto":
                tokens = "wedge_window" in cfg.model_fields_set
                dumped["detection"] = "tokens" if tokens else "heartbeat"
        if self.servers:
            del data["server"]  # unused beside a pool; a config rebuilt from this must not set both
        if self.watchdog.deadlines == "auto":
            wall = {"ttft_timeout", "stall_timeout"} & self.watchdog.model_fields_set
            data["watchdog"]["deadlines"] = "wall" if wall else "engine"
        # The snapshot is written into the ledger (and the effective config built from it goes to
        # Ray's workers): a password in the ledger's URL stays with the one who gave it.
        data["run"]["ledger"] = redact.stored_url(data["run"]["ledger"])
        return data

    def hash(self) -> str:
        blob = json.dumps(self.snapshot(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def with_secrets(stored: Config, given: Config | None, flag: str) -> Config:
    """A run's config as stored in the ledger (``snapshot``: its secrets masked) made whole again:
    each masked value taken from ``given``, the same config file (the caller checked their hashes
    match). BadInput naming the first masked field when there is a secret and no file."""
    data = stored.snapshot()
    where = redact.masked(data)
    if where is None:
        return stored
    if given is None:
        raise ConfigError(
            flag,
            where,
            "the ledger keeps no secret (values after key/token flags, env values); give the "
            f"run's config file again: wedgewatch run CONFIG {flag}",
        )
    return validate(redact.unmask(data, given.settings()), flag)


def server_of(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A config snapshot's server settings (a pool's first member: its members serve one model),
    for readers of snapshots in the ledger."""
    servers = snapshot.get("servers") or [snapshot.get("server") or {}]
    first: dict[str, Any] = servers[0]
    return first


Section = Literal["server", "watchdog", "agent", "suite", "run", "sandbox"]


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc)


def validate(data: dict[str, Any], source: str) -> Config:
    """Validate already-parsed settings; errors name ``source`` and the first bad field."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        # A rule over several sections (a model validator) has no location: its message names them.
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = _unknown(err["loc"])
        raise ConfigError(source, _field_path(err["loc"]) or None, msg) from None


def _unknown(loc: tuple[int | str, ...]) -> str:
    """The line for a key no section has: the nearest names of that section's fields (difflib),
    as a typo is the usual cause."""
    model: type[BaseModel] = Config
    for part in loc[:-1]:
        if isinstance(part, int):
            continue  # a [[servers]] member: its fields are the list's model's
        inner = model.model_fields[part].annotation
        model = next(a for a in (inner, *get_args(inner)) if isinstance(a, type) and issubclass(a, BaseModel))
    table = ".".join(str(p) for p in loc[:-1] if not isinstance(p, int))
    where = f"[[{table}]]" if any(isinstance(p, int) for p in loc) else f"[{table}]"
    what = f"no such field in {where}" if table else "no such section"
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=3, cutoff=0.6)
    if close:
        return f"{what}; did you mean {' or '.join(close)}?"
    return f"{what} (wedgewatch config --schema lists every field)"


def load_config(path: str | Path) -> Config:
    """Read a TOML config file. Any problem is a ConfigError naming the file and field."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(str(p), None, exc.strerror or str(exc)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(str(p), None, f"not UTF-8 text (byte {exc.start}): TOML is UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(p), None, f"not valid TOML: {exc}") from None
    return validate(data, str(p))
