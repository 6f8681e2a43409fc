"""The tables and columns of schema 7: which process wrote each open fact, so that what a SIGKILLed
process left open (a request in flight, a server life, a wrapped harness) is closed by the next
process that opens the ledger, and its servers are stopped (``stack/recovery.py``). Apart from
schema.py only to keep each module short; ``schema.TABLES`` includes them.

A process is named by three columns (``base/processes.py``): its ``pid``, its ``pid_space`` (this
boot, this pid namespace) and its ``pid_start`` (the start time that tells a reused pid apart).
"""

OWNER_TABLES = """
-- One row per generation request, written when the proxy has its body and sends it upstream, by
-- the process whose proxy holds it. Its end is its ``requests`` row; a start without an end whose
-- process is dead is ended ``interrupted`` by the next process that opens the ledger.
CREATE TABLE IF NOT EXISTS request_starts (
    request_id TEXT PRIMARY KEY,
    attempt_id TEXT,
    life_id TEXT,
    path TEXT NOT NULL,
    model TEXT,
    client_stream INTEGER NOT NULL,
    started_at REAL NOT NULL,
    pid INTEGER,
    pid_space TEXT,
    pid_start TEXT
);

CREATE INDEX IF NOT EXISTS request_starts_owner ON request_starts(pid_space, pid);
"""

OWNER_COLUMNS: list[tuple[str, str, str]] = [
    # The server's own process: its pid was there already; these tell a reused one apart.
    ("server_lives", "pid_space", "TEXT"),
    ("server_lives", "pid_start", "TEXT"),
    # The wedgewatch process that started the life and must end it.
    ("server_lives", "owner_pid", "INTEGER"),
    ("server_lives", "owner_pid_space", "TEXT"),
    ("server_lives", "owner_pid_start", "TEXT"),
    # The ``wrap`` process of a harness run.
    ("harness_runs", "pid", "INTEGER"),
    ("harness_runs", "pid_space", "TEXT"),
    ("harness_runs", "pid_start", "TEXT"),
]
