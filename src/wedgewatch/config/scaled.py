"""The config a run, ``serve`` or ``wrap`` actually uses: ``run.time_scale`` applied to the
simulator, the proxy's deadlines and the supervisor's windows, and ``run.seed`` handed to the
simulator. Every command that starts servers from a config file starts them from this, so the
example config's ``time_scale = 20`` means the same under each; the ledger keeps the config as
written.
"""

from __future__ import annotations

from typing import Any

from wedgewatch.config.load import Config, validate

SCALED_FLOOR = 1.0
"""Seconds: the least a time-scaled deadline is shrunk to (see ``_scaled``)."""


def effective(cfg: Config) -> Config:
    """``cfg`` with ``run.time_scale`` applied to the simulator and to the proxy's deadlines (a
    simulated minute lasts 60/time_scale seconds, so must its deadlines), and ``run.seed`` handed
    to the simulator."""
    data = cfg.settings()  # secrets included: the servers and agents it starts need them
    scale = cfg.run.time_scale
    watchdog = data["watchdog"]
    for server in data["servers"] or [data["server"]]:
        _effective_server(server, scale, cfg.run.seed)

    if scale != 1.0:
        for key in (
            "ttft_timeout",
            "stall_timeout",
            "engine_ttft_timeout",
            "engine_stall_timeout",
            "rate_window",
            "total_timeout",
        ):
            watchdog[key] = _scaled(watchdog[key], scale)
        watchdog["min_rate"] = watchdog["min_rate"] * scale
        # The client's deadline is on the server's work too; the agent's own limits (command
        # timeouts, the attempt's wall clock) are real time, as sandbox commands run at real speed.
        data["agent"]["client_timeout"] = _scaled(data["agent"]["client_timeout"], scale)
    return validate(data, "effective config")


def _scaled(seconds: float, scale: float) -> float:
    # A scaled deadline never drops below the machine's own scheduling noise (a busy event loop,
    # threads waiting for the GIL): below a second it would fire on a healthy server.
    return max(seconds / scale, min(seconds, SCALED_FLOOR))


def _effective_server(server: dict[str, Any], scale: float, seed: int) -> None:
    """One server's (or pool member's) settings under ``run.time_scale`` and ``run.seed``."""
    if scale != 1.0:
        if server["profile"] == "sim" and server["time_scale"] == 1.0:
            server["time_scale"] = scale
        # The supervisor's windows watch the server's work, so they shrink with it too.
        for key in ("wedge_window", "heartbeat_window", "canary_timeout"):
            server[key] = _scaled(server[key], scale)
        window = server["heartbeat_window"] if server["detection"] == "heartbeat" else server["wedge_window"]
        server["scrape_interval"] = min(server["scrape_interval"], max(0.1, window / 4))
        server["warmup"]["timeout"] = _scaled(server["warmup"]["timeout"], scale)
    if server["profile"] == "sim" and "--seed" not in server["args"]:
        server["args"] = [*server["args"], "--seed", str(seed)]
