"""The one settings package: every knob of a run or a supervised server, with its default and why.

A config file is TOML with the sections ``[server]`` (or a ``[[servers]]`` pool), ``[watchdog]``,
``[agent]``, ``[suite]``, ``[run]`` and ``[sandbox]``: ``section.py`` is the base every section
derives from, ``server.py`` a server's own, ``run.py`` the run's, ``ray.py`` the Ray executor's,
``load.py`` the whole file (``load_config``), and ``scaled.py`` the config as the commands that
start servers use it (``effective``: ``run.time_scale`` and ``run.seed`` applied). Callers import the names from here.
"""

from wedgewatch.config.load import Config, load_config, server_of, validate, with_secrets
from wedgewatch.config.ray import RayConfig
from wedgewatch.config.run import AgentConfig, RunConfig, SandboxConfig, SuiteConfig, WatchdogConfig
from wedgewatch.config.scaled import effective
from wedgewatch.config.server import ServerConfig, WarmupConfig

__all__ = [
    "AgentConfig",
    "Config",
    "RayConfig",
    "RunConfig",
    "SandboxConfig",
    "ServerConfig",
    "SuiteConfig",
    "WarmupConfig",
    "WatchdogConfig",
    "effective",
    "load_config",
    "server_of",
    "validate",
    "with_secrets",
]
