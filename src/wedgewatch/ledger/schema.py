"""The ledger's schema: append-only tables of facts, and views that derive everything else.

A fact is never rewritten: an attempt's end is a row in ``attempt_ends``, not an UPDATE of its
start; a server life's end is a row in ``server_life_ends``. Instance outcomes, scores and what to
retry are views. Bump SCHEMA_VERSION with every change and add a migration step in store.py.
"""

SCHEMA_VERSION = 1

TABLES = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- One row per run: its configuration as it was when the run was created.
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    started_at REAL NOT NULL,
    config_json TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    tool_version TEXT NOT NULL,
    suite TEXT,
    attempts_max INTEGER NOT NULL,
    seed INTEGER
);

-- Things that happen to a run: started, resumed, finished, interrupted.
CREATE TABLE IF NOT EXISTS run_marks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    detail_json TEXT
);

-- The run's suite, as it was loaded: the denominator of every score.
CREATE TABLE IF NOT EXISTS run_instances (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    instance_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (run_id, instance_id)
);

-- One row per server life, written when it starts.
CREATE TABLE IF NOT EXISTS server_lives (
    life_id TEXT PRIMARY KEY,
    run_id TEXT,
    profile TEXT NOT NULL,
    argv_json TEXT,
    flags_json TEXT,
    base_url TEXT NOT NULL,
    pid INTEGER,
    start_reason TEXT NOT NULL,
    started_at REAL NOT NULL,
    log_path TEXT
);

-- When a server life became ready, and its warm-up results.
CREATE TABLE IF NOT EXISTS server_life_ready (
    life_id TEXT PRIMARY KEY REFERENCES server_lives(life_id),
    ready_at REAL NOT NULL,
    ready_seconds REAL NOT NULL,
    warmup_json TEXT
);

-- How a server life ended, and how old it was then.
CREATE TABLE IF NOT EXISTS server_life_ends (
    life_id TEXT PRIMARY KEY REFERENCES server_lives(life_id),
    ended_at REAL NOT NULL,
    end_reason TEXT NOT NULL,
    exit_code INTEGER,
    age_seconds REAL,
    age_requests INTEGER,
    age_tokens INTEGER
);

-- One row per attempt, written when it starts.
CREATE TABLE IF NOT EXISTS attempts (
    attempt_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    instance_id TEXT NOT NULL,
    attempt_no INTEGER NOT NULL,
    started_at REAL NOT NULL,
    life_id TEXT,
    agent TEXT,
    sandbox_path TEXT
);

-- How an attempt ended: status is submitted, early_stop, api_error, harness_error, interrupted.
CREATE TABLE IF NOT EXISTS attempt_ends (
    attempt_id TEXT PRIMARY KEY REFERENCES attempts(attempt_id),
    ended_at REAL NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    patch TEXT,
    steps INTEGER,
    tokens INTEGER,
    life_id TEXT,
    detail_json TEXT
);

-- The verdict on a submitted patch (local tests or an imported SWE-bench report).
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    attempt_id TEXT NOT NULL REFERENCES attempts(attempt_id),
    ts REAL NOT NULL,
    resolved INTEGER,
    source TEXT NOT NULL,
    detail_json TEXT
);

-- One row per LLM request through the proxy, written when it ends.
CREATE TABLE IF NOT EXISTS requests (
    request_id TEXT PRIMARY KEY,
    attempt_id TEXT,
    life_id TEXT,
    path TEXT NOT NULL,
    model TEXT,
    client_stream INTEGER NOT NULL,
    started_at REAL NOT NULL,
    ttft REAL,
    tokens_out INTEGER NOT NULL DEFAULT 0,
    max_gap REAL,
    duration REAL NOT NULL,
    outcome TEXT NOT NULL,
    http_status INTEGER,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    age_seconds REAL,
    age_requests INTEGER,
    age_tokens INTEGER,
    detail_json TEXT
);

-- Everything else that happened: wedges with their evidence, canaries, restarts, crashes, stalls.
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    run_id TEXT,
    life_id TEXT,
    attempt_id TEXT,
    detail_json TEXT
);

-- Scraped server metrics (only the series the supervisor watches).
CREATE TABLE IF NOT EXISTS metric_samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    life_id TEXT NOT NULL,
    name TEXT NOT NULL,
    value REAL NOT NULL
);

CREATE INDEX IF NOT EXISTS attempts_run ON attempts(run_id, instance_id);
CREATE INDEX IF NOT EXISTS requests_attempt ON requests(attempt_id);
CREATE INDEX IF NOT EXISTS events_kind ON events(kind, ts);
CREATE INDEX IF NOT EXISTS samples_life ON metric_samples(life_id, ts);
CREATE INDEX IF NOT EXISTS evaluations_attempt ON evaluations(attempt_id, id);
"""

VIEWS = """
DROP VIEW IF EXISTS attempt_view;
CREATE VIEW attempt_view AS
SELECT a.attempt_id, a.run_id, a.instance_id, a.attempt_no, a.started_at, a.agent, a.sandbox_path,
       COALESCE(e.life_id, a.life_id) AS life_id,
       e.ended_at, COALESCE(e.status, 'running') AS status, COALESCE(e.reason, '') AS reason,
       e.patch, e.steps, e.tokens, e.detail_json,
       e.ended_at - a.started_at AS duration,
       (SELECT ev.resolved FROM evaluations ev WHERE ev.attempt_id = a.attempt_id
         ORDER BY ev.id DESC LIMIT 1) AS resolved
FROM attempts a LEFT JOIN attempt_ends e ON e.attempt_id = a.attempt_id;

-- The first model-side attempt of each instance decides its outcome; infrastructure attempts
-- only count toward infra_failed once every allowed attempt has been spent on them.
DROP VIEW IF EXISTS instance_outcomes;
CREATE VIEW instance_outcomes AS
WITH per AS (
  SELECT ri.run_id, ri.instance_id, ri.position, r.attempts_max,
    (SELECT av.attempt_id FROM attempt_view av
      WHERE av.run_id = ri.run_id AND av.instance_id = ri.instance_id
        AND av.status IN ('submitted', 'early_stop')
      ORDER BY av.attempt_no LIMIT 1) AS final_attempt,
    (SELECT COUNT(*) FROM attempt_view av
      WHERE av.run_id = ri.run_id AND av.instance_id = ri.instance_id) AS n_attempts,
    (SELECT COUNT(*) FROM attempt_view av
      WHERE av.run_id = ri.run_id AND av.instance_id = ri.instance_id
        AND av.status IN ('api_error', 'harness_error', 'interrupted')) AS n_infra,
    (SELECT COUNT(*) FROM attempt_view av
      WHERE av.run_id = ri.run_id AND av.instance_id = ri.instance_id
        AND av.status = 'api_error') AS n_api_error
  FROM run_instances ri JOIN runs r ON r.run_id = ri.run_id
)
SELECT per.run_id, per.instance_id, per.position, per.n_attempts, per.n_infra, per.n_api_error,
       per.final_attempt,
       CASE
         WHEN fa.status = 'early_stop' THEN 'early_stop'
         WHEN fa.status = 'submitted' AND (fa.patch IS NULL OR TRIM(fa.patch) = '') THEN 'empty_patch'
         WHEN fa.status = 'submitted' AND fa.resolved = 1 THEN 'resolved'
         WHEN fa.status = 'submitted' AND fa.resolved = 0 THEN 'unresolved'
         WHEN fa.status = 'submitted' THEN 'pending'
         WHEN per.n_infra >= per.attempts_max THEN 'infra_failed'
         ELSE 'pending'
       END AS outcome,
       fa.reason AS final_reason
FROM per LEFT JOIN attempt_view fa ON fa.attempt_id = per.final_attempt;

DROP VIEW IF EXISTS server_life_view;
CREATE VIEW server_life_view AS
SELECT l.*, r.ready_at, r.ready_seconds, r.warmup_json,
       e.ended_at, e.end_reason, e.exit_code, e.age_seconds, e.age_requests, e.age_tokens
FROM server_lives l
LEFT JOIN server_life_ready r ON r.life_id = l.life_id
LEFT JOIN server_life_ends e ON e.life_id = l.life_id;
"""
