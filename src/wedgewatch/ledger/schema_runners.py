"""The tables of schema 6: the runner processes working on a run, their liveness, their ends,
and the evaluations they claimed (several runners on one run, docs/scale-out.md). Apart from
schema.py only to keep each module short; ``schema.TABLES`` includes them."""

RUNNER_TABLES = """
-- One row per runner process working on a run (``run``, ``--resume``, ``--join``): where it runs
-- and how long its lease lasts. Several runners may work on one run when the ledger is shared.
CREATE TABLE IF NOT EXISTS runners (
    runner_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    role TEXT NOT NULL,  -- start, resume or join
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    pid_space TEXT,  -- boot id and pid namespace: where the pid means this process
    pid_start TEXT,  -- the process's start time (/proc/<pid>/stat), against a reused pid
    started_at REAL NOT NULL,
    lease_seconds REAL,  -- dead when its last beat is older; NULL: no lease (a one-writer ledger)
    tool_version TEXT NOT NULL
);

-- A runner's liveness: one row every run.lease_interval seconds, stamped with the database's
-- clock (runners on several hosts are judged by one clock, whatever theirs say).
CREATE TABLE IF NOT EXISTS runner_beats (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    runner_id TEXT NOT NULL REFERENCES runners(runner_id),
    ts REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);

-- How a runner ended: its own end mark (finished, interrupted, aborted), or lost (another runner
-- or a resume found it dead, by its pid or its lease).
CREATE TABLE IF NOT EXISTS runner_ends (
    runner_id TEXT PRIMARY KEY REFERENCES runners(runner_id),
    ended_at REAL NOT NULL,
    how TEXT NOT NULL,
    detail_json TEXT
);

-- The server lives a runner started (its own stack): when the runner dies, the run's other
-- runners end them (and stop them where its pids are visible), as a resume does.
CREATE TABLE IF NOT EXISTS runner_lives (
    life_id TEXT PRIMARY KEY REFERENCES server_lives(life_id),
    runner_id TEXT NOT NULL REFERENCES runners(runner_id)
);

-- An evaluation claimed: (attempt, number) once, whoever asks. An evaluations row with the same
-- eval_no ends it; one without, whose runner is dead, was abandoned and the next number runs.
CREATE TABLE IF NOT EXISTS evaluation_starts (
    attempt_id TEXT NOT NULL REFERENCES attempts(attempt_id),
    eval_no INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    runner_id TEXT,
    started_at REAL NOT NULL,
    PRIMARY KEY (attempt_id, eval_no)
);

CREATE INDEX IF NOT EXISTS runners_run ON runners(run_id);
CREATE INDEX IF NOT EXISTS beats_runner ON runner_beats(runner_id, ts);
"""
