"""The factors of an ablation: what each level means in a run config, and how to read the level
back from a run's config snapshot (so a finished design needs no side file to be analysed).

Each factor has two levels; the first is the reference (the story's procedure, or its load), and
effects are reported as "second level minus first".
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wedgewatch.base.errors import BadInput
from wedgewatch.config import server_of

# A server that "already served another workload", for the simulator: requests before the run
# (the demo's used arm uses the same figure; past the seed scenario's age ramp).
USED_SERVER_AGE = 3000
HYBRID_SAFE = "hybrid-safe"
NO_PREFIX = "--no-enable-prefix-caching"
EAGER = "--enforce-eager"
# Profiles whose hybrid-safe arg set is exactly the two vLLM flags.
VLLM_LIKE = ("vllm", "sim")

Snapshot = dict[str, Any]


@dataclass(frozen=True)
class Factor:
    name: str
    levels: tuple[Any, Any]
    meaning: str
    path: str | None = None  # a dotted config field, for factors given as one

    def apply(self, cfg: Snapshot, level: Any, used_age: int = USED_SERVER_AGE) -> None:
        if self.path is not None:
            _set(cfg, self.path, level)
        else:
            _APPLY[self.name](cfg, level, used_age)

    def read(self, snap: Snapshot) -> Any:
        if self.path is not None:
            return _get(snap, self.path)
        return _READ[self.name](snap)


def _server(cfg: Snapshot) -> dict[str, Any]:
    server: dict[str, Any] = cfg.setdefault("server", {})
    return server


def _args(cfg: Snapshot) -> list[str]:
    args: list[str] = _server(cfg).setdefault("args", [])
    return args


def _preload_age(snap: Snapshot) -> int:
    args = [str(a) for a in server_of(snap).get("args", [])]
    for i, a in enumerate(args):
        if a == "--preload-age" and i + 1 < len(args):
            return int(args[i + 1]) if args[i + 1].isdigit() else 0
        if a.startswith("--preload-age="):
            v = a.split("=", 1)[1]
            return int(v) if v.isdigit() else 0
    return 0


def _apply_fresh(cfg: Snapshot, level: Any, used_age: int) -> None:
    server = _server(cfg)
    if level == "on":
        server["fresh"] = True
        return
    if level != "off":
        raise BadInput(f"--factors: fresh takes on/off, not {level!r}")
    server["fresh"] = False
    if server.get("profile", "sim") == "sim":
        _args(cfg).extend(["--preload-age", str(used_age)])


def _read_fresh(snap: Snapshot) -> str:
    fresh = server_of(snap).get("fresh", True)
    return "off" if (not fresh or _preload_age(snap) > 0) else "on"


def _apply_warmup(cfg: Snapshot, level: Any, used_age: int) -> None:
    _server(cfg).setdefault("warmup", {})["count"] = level


def _apply_flags(cfg: Snapshot, level: Any, used_age: int) -> None:
    sets = [s for s in _server(cfg).get("arg_sets", []) if s != HYBRID_SAFE]
    _server(cfg)["arg_sets"] = sets if level == "none" else [*sets, str(level)]


def _read_flags(snap: Snapshot) -> str:
    return HYBRID_SAFE if HYBRID_SAFE in server_of(snap).get("arg_sets", []) else "none"


def _flag_applier(flag: str, present_level: str) -> Callable[[Snapshot, Any, int], None]:
    def apply(cfg: Snapshot, level: Any, used_age: int) -> None:
        args = [a for a in _args(cfg) if a != flag]
        _server(cfg)["args"] = [*args, flag] if level == present_level else args

    return apply


def _flag_reader(flag: str, present: str, absent: str) -> Callable[[Snapshot], str]:
    def read(snap: Snapshot) -> str:
        server = server_of(snap)
        via_set = HYBRID_SAFE in server.get("arg_sets", []) and server.get("profile", "sim") in VLLM_LIKE
        return present if (flag in server.get("args", []) or via_set) else absent

    return read


# The adapter a `lora` factor adds when the base config serves none (the simulator takes any path).
DEFAULT_ADAPTER = ("story-lora", "/adapters/story-lora")


def _apply_lora(cfg: Snapshot, level: Any, used_age: int) -> None:
    """base: the agent asks for the base model; adapter: for the config's only adapter (one is
    added when it has none), served beside the base model under its own name."""
    agent: dict[str, Any] = cfg.setdefault("agent", {})
    if level == "base":
        agent.pop("model", None)
        return
    if level != "adapter":
        raise BadInput(f"--factors: lora takes base/adapter, not {level!r}")
    mods: dict[str, str] = _server(cfg).setdefault("lora_modules", {})
    if len(mods) > 1:
        raise BadInput("--factors: lora: the base config serves several adapters; keep one")
    if not mods:
        mods[DEFAULT_ADAPTER[0]] = DEFAULT_ADAPTER[1]
    agent["model"] = next(iter(mods))


def _read_lora(snap: Snapshot) -> str:
    requested = (snap.get("agent") or {}).get("model")
    return "adapter" if requested in (server_of(snap).get("lora_modules") or {}) else "base"


def _apply_concurrency(cfg: Snapshot, level: Any, used_age: int) -> None:
    cfg.setdefault("run", {})["concurrency"] = level


_APPLY: dict[str, Callable[[Snapshot, Any, int], None]] = {
    "fresh": _apply_fresh,
    "warmup": _apply_warmup,
    "flags": _apply_flags,
    "concurrency": _apply_concurrency,
    "lora": _apply_lora,
    "prefix_caching": _flag_applier(NO_PREFIX, "off"),
    "eager": _flag_applier(EAGER, "on"),
}
_READ: dict[str, Callable[[Snapshot], Any]] = {
    "fresh": _read_fresh,
    "warmup": lambda s: s.get("server", {}).get("warmup", {}).get("count", 2),
    "flags": _read_flags,
    "concurrency": lambda s: s.get("run", {}).get("concurrency", 4),
    "lora": _read_lora,
    "prefix_caching": _flag_reader(NO_PREFIX, "off", "on"),
    "eager": _flag_reader(EAGER, "on", "off"),
}

KNOWN: dict[str, Factor] = {
    f.name: f
    for f in (
        Factor("fresh", ("on", "off"), "server.fresh; off also starts the simulator with --preload-age N"),
        Factor("warmup", (2, 0), "server.warmup.count"),
        Factor(
            "flags",
            (HYBRID_SAFE, "none"),
            "server.arg_sets (hybrid-safe: --no-enable-prefix-caching --enforce-eager)",
        ),
        Factor("concurrency", (4, 1), "run.concurrency"),
        Factor(
            "lora",
            ("base", "adapter"),
            "agent.model: the base model, or the adapter in server.lora_modules (one is added if none)",
        ),
        Factor("prefix_caching", ("off", "on"), f"{NO_PREFIX} in server.args (vllm, sim)"),
        Factor("eager", ("on", "off"), f"{EAGER} in server.args (vllm, sim)"),
    )
}
DEFAULT_FACTORS = ("fresh", "warmup", "flags", "concurrency")


def _value(text: str) -> Any:
    """A level as TOML would read it: int, float, bool, else the string."""
    try:
        return json.loads(text.lower() if text.lower() in ("true", "false") else text)
    except json.JSONDecodeError:
        return text


def parse(specs: list[str]) -> list[Factor]:
    """``--factors`` items: ``name`` or ``name=A/B`` (known factors), or ``section.field=A/B``
    (any config field), comma-separated or repeated."""
    items = [s.strip() for spec in specs for s in spec.split(",") if s.strip()]
    out: list[Factor] = []
    for item in items:
        name, _, levels_text = item.partition("=")
        name = name.strip()
        levels: tuple[Any, Any] | None = None
        if levels_text:
            parts = [p.strip() for p in levels_text.split("/")]
            if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
                raise BadInput(f"--factors: {item!r}: give two different levels, as name=A/B")
            levels = (_value(parts[0]), _value(parts[1]))
        if name in KNOWN:
            base = KNOWN[name]
            out.append(Factor(name, levels or base.levels, base.meaning))
        elif "." in name:
            if levels is None:
                raise BadInput(f"--factors: {item!r}: a config field needs its two levels, as {name}=A/B")
            out.append(Factor(name, levels, name, path=name))
        else:
            raise BadInput(
                f"--factors: unknown factor {name!r} (known: {', '.join(KNOWN)}; or a config field "
                "as section.field=A/B)"
            )
    names = [f.name for f in out]
    if len(set(names)) != len(names):
        raise BadInput(f"--factors: a factor is named twice ({', '.join(names)})")
    if "flags" in names and ({"prefix_caching", "eager"} & set(names)):
        raise BadInput("--factors: flags sets both vLLM flags; use it or prefix_caching/eager, not both")
    return out


def _set(cfg: Snapshot, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = cfg
    for p in parents:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise BadInput(f"--factors: {path}: {p} is not a section")
    node[leaf] = copy.deepcopy(value)


def _get(snap: Snapshot, path: str) -> Any:
    node: Any = snap
    for p in path.split("."):
        if not isinstance(node, dict) or p not in node:
            return None
        node = node[p]
    return node
