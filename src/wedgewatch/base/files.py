"""The files and directories wedgewatch creates are its user's alone: 0600 files, 0700
directories. A ledger holds prompts' fingerprints, a server's log its arguments, an export the
model's patches: nothing another account on a shared machine should read.

Two layers, so that nothing is missed: every command sets the process's umask to 077 at start
(``private_umask``: it covers every writer, SQLite's -wal and -shm files, and the processes the
command starts), and the writers that may run outside a command (a library user's proxy, the
supervisor's logs) ask for the modes themselves with the helpers here. A directory or file that
already exists keeps its mode: it is the user's, not ours.

``check_writable`` is the other half of failing early: a directory a run cannot write is said in
one line naming the field before any server starts, not found out by every attempt failing alike.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from wedgewatch.base.errors import BadInput

PRIVATE_FILE = 0o600
"""Mode of every file wedgewatch creates."""

PRIVATE_DIR = 0o700
"""Mode of every directory wedgewatch creates."""

PRIVATE_UMASK = 0o077
"""The umask every command runs under (and the processes it starts inherit)."""


def private_umask() -> int:
    """Set the process's umask so that what it creates is the user's only; returns the old one."""
    return os.umask(PRIVATE_UMASK)


def private_dir(path: str | Path) -> Path:
    """``mkdir -p`` with every directory it creates 0700 (``Path.mkdir(parents=True)`` gives the
    parents the default mode)."""
    p = Path(path)
    missing: list[Path] = []
    for d in (p, *p.parents):
        if d.exists():
            break
        missing.append(d)
    for d in reversed(missing):
        try:
            d.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:
            continue  # made by another process meanwhile
        os.chmod(d, PRIVATE_DIR)  # mkdir's mode passes through the umask; this does not
    return p


def write_private(path: str | Path, data: str | bytes) -> None:
    """Write a whole file (an export, a report), 0600 when it is new; its directories 0700."""
    p = Path(path)
    private_dir(p.parent)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    with os.fdopen(fd, "wb") as fh:
        fh.write(raw)


def create_private(path: str | Path) -> None:
    """Create an empty file 0600 if there is none (a SQLite ledger, before SQLite opens it with
    its own default mode, which its -wal and -shm files then copy)."""
    p = Path(path)
    private_dir(p.parent)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        return
    os.close(fd)


def check_writable(path: str | Path, field: str, shown: str | None = None) -> None:
    """BadInput naming ``field`` (and ``shown``, the file wanted there, else ``path``) unless
    ``path`` is a directory this process can create files in, or can be created (its nearest
    existing ancestor is one). Tried, not inferred from modes: root passes every mode check and
    still cannot write a read-only mount."""
    p = Path(path).expanduser()
    path = shown or path
    for d in (p, *p.absolute().parents):
        if not d.exists():
            continue
        if not d.is_dir():
            raise BadInput(f"{field}: {path}: {d} is not a directory")
        try:
            fd, probe = tempfile.mkstemp(prefix=".wedgewatch-probe-", dir=d)
        except OSError as exc:
            what = "" if d == p else f" (nor can {d}, where it would be created)"
            raise BadInput(f"{field}: {path} cannot be written: {exc.strerror or exc}{what}") from None
        os.close(fd)
        os.unlink(probe)
        return
