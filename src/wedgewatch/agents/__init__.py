"""Agents: one protocol (``protocols.Agent``), a string registry, lazy imports.

``get_agent("bash", cfg)`` builds the built-in agent; ``command`` drives any external command and
``mini-swe-agent`` the real mini-swe-agent package. Modules are imported only when their agent is
asked for, so the optional dependencies of one agent never slow down or break another.
"""

from __future__ import annotations

from wedgewatch.base import registry
from wedgewatch.base.protocols import Agent
from wedgewatch.config import AgentConfig

# name -> "module:attribute"; the attribute is a class taking (cfg: AgentConfig).
REGISTRY: dict[str, str] = {
    "bash": "wedgewatch.agents.bash:BashAgent",
    "command": "wedgewatch.agents.command:CommandAgent",
    "mini-swe-agent": "wedgewatch.agents.miniswe:MiniSweAgent",
    # One request, then a fixed patch: the trivial task of `wedgewatch bench runner` (runner/).
    "echo": "wedgewatch.agents.echo:EchoAgent",
}


def get_agent(name: str, cfg: AgentConfig | None = None) -> Agent:
    """Instantiate the agent registered as ``name`` with ``cfg`` (defaults when None)."""
    cls = registry.load(REGISTRY, name, "agent.name", "agent")
    agent: Agent = cls(cfg or AgentConfig())
    return agent


def check_agent(name: str) -> None:
    """``BadInput`` naming ``agent.name`` if no agent is registered as ``name`` (its module is
    imported, so one that cannot be is refused too): a command checks it before it writes a row
    or says a run has started."""
    registry.load(REGISTRY, name, "agent.name", "agent")


__all__ = ["REGISTRY", "check_agent", "get_agent"]
