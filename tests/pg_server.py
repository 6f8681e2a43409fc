"""A real PostgreSQL for the tests: the machine's own binaries (Debian's postgresql package,
/usr/lib/postgresql/N/bin), a cluster on a temporary directory, listening on a free port of
127.0.0.1, started once per test session (per xdist worker) and removed after it.

initdb refuses to run as root, so as root the cluster belongs to an unprivileged user
(``postgres`` where the package made it, else ``nobody``)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def find_bindir() -> Path | None:
    """The newest PostgreSQL server binaries on this machine, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return ["runuser", "-u", name, "--"]
    raise RuntimeError("running as root and neither user postgres nor nobody exists for initdb")


@dataclass
class PgServer:
    bindir: Path
    root: Path
    port: int
    prefix: list[str]

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://wedgewatch@127.0.0.1:{self.port}/{db}"

    def admin(self, sql: str) -> None:
        subprocess.run(
            [*self.prefix, str(self.bindir / "psql"), "-q", "-h", "127.0.0.1", "-p", str(self.port),
             "-U", "wedgewatch", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", sql],
            check=True, capture_output=True, text=True,
        )  # fmt: skip

    def new_database(self) -> str:
        """A fresh, empty database; its URL."""
        name = "t_" + uuid.uuid4().hex[:12]
        self.admin(f"CREATE DATABASE {name}")
        return self.url(name)


def start() -> Iterator[PgServer]:
    bindir = find_bindir()
    if bindir is None:
        pytest.skip(
            "no PostgreSQL server binaries (Debian: apt-get install postgresql; make install does it)"
        )
    prefix = _as_user()
    root = Path(tempfile.mkdtemp(prefix="wedgewatch-pg-"))
    if prefix:
        user = prefix[2]
        shutil.chown(root, user=user)
        os.chmod(root, 0o700)
    data, port = root / "data", _free_port()
    run = [*prefix]
    subprocess.run(
        [*run, str(bindir / "initdb"), "-D", str(data), "-U", "wedgewatch", "--auth=trust", "-E", "UTF8",
         "--no-sync", "--locale=C"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    # Durability of PostgreSQL's own crash is not what the tests are about: fsync off makes
    # CREATE DATABASE and commits cheap.
    opts = f"-p {port} -c listen_addresses=127.0.0.1 -k {root} -c fsync=off -c synchronous_commit=off "
    opts += "-c full_page_writes=off -c max_connections=200"
    subprocess.run(
        [*run, str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "-t", "30",
         "start"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    server = PgServer(bindir, root, port, prefix)
    try:
        yield server
    finally:
        subprocess.run(
            [*run, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)
