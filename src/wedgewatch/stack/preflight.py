"""Before any server starts: the directories a command will write must be writable.

A ``run.workdir`` nobody can write used to run to the end and score every instance
``infra_failed``; a log directory that cannot be written failed each server start alike. Here each
is tried once, up front, and a problem is one line naming the field (exit 2).
"""

from __future__ import annotations

from pathlib import Path

from wedgewatch.base.files import check_writable
from wedgewatch.config import Config
from wedgewatch.ledger.target import backend_of


def check(
    cfg: Config, ledger: str | None = None, ledger_field: str = "run.ledger", workdir: bool = False
) -> None:
    """``run.workdir`` (with ``workdir``: only ``run`` writes there), every server's ``log_dir``,
    and the directory of the SQLite ledger (``ledger``, default ``run.ledger``, named
    ``ledger_field``: ``--ledger`` when the flag gave it)."""
    if workdir:
        check_writable(cfg.run.workdir, "run.workdir")
    for i, member in enumerate(cfg.members()):
        where = f"servers.{member.name or i}" if cfg.servers else "server"
        check_writable(member.log_dir, f"{where}.log_dir")
    target = ledger or cfg.run.ledger
    if backend_of(target) == "sqlite" and target != ":memory:":  # a database is not on this disk
        check_writable(Path(target).parent, ledger_field, shown=target)
