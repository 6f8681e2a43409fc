"""Turn a bundled instance into a real git repository at a deterministic base commit.

The commit's sha depends only on the files, the message, and the author and committer (name,
email, date), all of which are fixed here, so ``base_commit`` in the data equals the sha produced
on any machine with any git configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from wedgewatch.base.errors import SandboxError
from wedgewatch.suites.bundled import bundled_repo_source
from wedgewatch.suites.git import git_env, run_git

AUTHOR_NAME = "wedgewatch suite"
AUTHOR_EMAIL = "suite@wedgewatch.invalid"


def _git_date(created_at: str) -> str:
    """``2024-01-08T09:12:00Z`` -> ``@1704705120 +0000`` (git's exact, locale-free form)."""
    stamp = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    return f"@{int(stamp.timestamp())} +0000"


def commit_env(created_at: str) -> dict[str, str]:
    """Environment that makes ``git commit`` deterministic."""
    date = _git_date(created_at)
    return git_env(
        {
            "GIT_AUTHOR_NAME": AUTHOR_NAME,
            "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
            "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_NAME": AUTHOR_NAME,
            "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL,
            "GIT_COMMITTER_DATE": date,
        }
    )


def write_files(dest: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def commit_tree(dest: Path, files: Mapping[str, str], message: str, created_at: str) -> str:
    """Write ``files`` into a new repository at ``dest`` as one root commit; return its sha."""
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise SandboxError(f"{dest} is not empty")
    write_files(dest, files)
    env = commit_env(created_at)
    # --template= keeps the system's sample hooks out; -b fixes the branch name.
    run_git(dest, "init", "-q", "--template=", "-b", "main", env=env)
    run_git(dest, "add", "-A", env=env)
    run_git(dest, "commit", "-q", "--no-verify", "-m", message, env=env)
    return run_git(dest, "rev-parse", "HEAD", env=env).strip()


def base_message(instance_id: str) -> str:
    return f"{instance_id}: base\n"


def materialise(instance: Mapping[str, Any], dest: Path) -> Path:
    """Write a bundled instance's repository at its base state into ``dest`` (new or empty) as a
    git repository whose HEAD is ``base_commit``. Raises SandboxError if the sha differs."""
    iid = str(instance["instance_id"])
    full = dict(instance)
    files = bundled_repo_source(iid)
    created_at = str(full.get("created_at") or "2024-01-01T00:00:00Z")
    sha = commit_tree(Path(dest), files, base_message(iid), created_at)
    expected = full.get("base_commit")
    if expected and sha != expected:
        raise SandboxError(f"{iid}: materialised commit {sha} differs from base_commit {expected}")
    return Path(dest)
