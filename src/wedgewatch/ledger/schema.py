"""The ledger's schema: append-only tables of facts, and views that derive everything else. Long
because it is the whole schema, one text read in one place.

A fact is never rewritten: an attempt's end is a row in ``attempt_ends``, not an UPDATE of its
start; a server life's end is a row in ``server_life_ends``. Instance outcomes, scores and what to
retry are views. Bump SCHEMA_VERSION with every change and add a migration step in store.py.
"""

from wedgewatch.base.vocab import (
    API_ERROR,
    BUDGETED,
    EARLY_STOP,
    EMPTY_PATCH,
    INFRA_FAILED,
    INTERRUPTED,
    MODEL_SIDE,
    PENDING,
    REQUEUE_KINDS,
    REQUEUE_REASONS,
    RESOLVED,
    RUNNING,
    SUBMITTED,
    UNRESOLVED,
    sql_list,
)
from wedgewatch.ledger.schema_owners import OWNER_COLUMNS, OWNER_TABLES
from wedgewatch.ledger.schema_runners import RUNNER_TABLES

SCHEMA_VERSION = 7  # 3: harness_runs, harness_run_ends (wedgewatch wrap); 4: run_changes;
# 5: server_lives.member (a pool of servers, [[servers]]); 6: several runners on one run (runners,
# runner_beats, runner_ends, runner_lives, evaluation_starts, attempts.runner_id, evaluations.eval_no, the unique
# index attempts_claim); 7: request_starts and the pid columns of server_lives and harness_runs
# (schema_owners.py: what a SIGKILLed process left open is closed by the next one)

# Columns added after version 1, per version: (table, column, type). A ledger written by an older
# wedgewatch gets them with ALTER TABLE ... ADD COLUMN (existing rows read NULL there); fresh
# ledgers get them from the CREATE TABLE statements below. Nothing is ever dropped or renamed.
ADDED_COLUMNS: dict[int, list[tuple[str, str, str]]] = {
    2: [
        ("run_instances", "instance_json", "TEXT"),
        ("attempts", "age_seconds", "REAL"),
        ("attempts", "age_requests", "INTEGER"),
        ("attempts", "age_tokens", "INTEGER"),
        ("attempt_ends", "age_seconds", "REAL"),
        ("attempt_ends", "age_requests", "INTEGER"),
        ("attempt_ends", "age_tokens", "INTEGER"),
    ],
    4: [],  # the table run_changes (CREATE TABLE IF NOT EXISTS makes it in older files)
    5: [("server_lives", "member", "TEXT")],
    # The tables runners, runner_beats, runner_ends, runner_lives, evaluation_starts and the index
    # attempts_claim, come from CREATE ... IF NOT EXISTS.
    6: [("attempts", "runner_id", "TEXT"), ("evaluations", "eval_no", "INTEGER")],
    # Fresh ledgers get these from here too: the CREATE TABLE statements are version 6's.
    7: OWNER_COLUMNS,
}

TABLES = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- One row per schema version this file has been brought to; the current one is MAX(version).
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    applied_at REAL NOT NULL,
    tool_version TEXT NOT NULL
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

-- Things that happen to a run: started, resumed, finished, interrupted, aborted (detail: pid, why).
CREATE TABLE IF NOT EXISTS run_marks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    detail_json TEXT
);

-- Settings of a run changed after it was created (``--resume RUN --attempts N``): the runs row
-- keeps the config as it was; the latest change of a field is the one in force.
CREATE TABLE IF NOT EXISTS run_changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    ts REAL NOT NULL,
    field TEXT NOT NULL,  -- a config field, for example run.attempts
    value_json TEXT NOT NULL,
    previous_json TEXT,
    detail_json TEXT
);

-- The run's suite, as it was loaded: the denominator of every score.
CREATE TABLE IF NOT EXISTS run_instances (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    instance_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    instance_json TEXT,  -- the instance record itself, so a resume never re-reads the suite file
    PRIMARY KEY (run_id, instance_id)
);

-- One row per harness run under ``wedgewatch wrap``: the command (secrets masked) and the config.
-- Its server lives and events carry its harness_run_id in their run_id column.
CREATE TABLE IF NOT EXISTS harness_runs (
    harness_run_id TEXT PRIMARY KEY,
    started_at REAL NOT NULL,
    argv_json TEXT NOT NULL,
    cwd TEXT,
    base_url TEXT,
    config_json TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    tool_version TEXT NOT NULL
);

-- How a wrapped harness ended: its exit code (128 + signal when a signal ended it) and why.
CREATE TABLE IF NOT EXISTS harness_run_ends (
    harness_run_id TEXT PRIMARY KEY REFERENCES harness_runs(harness_run_id),
    ended_at REAL NOT NULL,
    exit_code INTEGER,
    end_reason TEXT NOT NULL
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
    log_path TEXT,
    member TEXT  -- the pool member ([[servers]] name) this life belongs to; NULL before version 5
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
    sandbox_path TEXT,
    age_seconds REAL,  -- the server life's age when the attempt started
    age_requests INTEGER,
    age_tokens INTEGER,
    runner_id TEXT  -- the runner process that claimed it (runners); NULL before version 6
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
    detail_json TEXT,
    age_seconds REAL,  -- the server life's age when the attempt ended
    age_requests INTEGER,
    age_tokens INTEGER
);

-- The verdict on a submitted patch (local tests or an imported SWE-bench report).
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    attempt_id TEXT NOT NULL REFERENCES attempts(attempt_id),
    ts REAL NOT NULL,
    resolved INTEGER,
    source TEXT NOT NULL,
    detail_json TEXT,
    eval_no INTEGER  -- the evaluation_starts row it ends; NULL for imported verdicts and before 6
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
CREATE INDEX IF NOT EXISTS requests_life ON requests(life_id, started_at);
CREATE INDEX IF NOT EXISTS lives_run ON server_lives(run_id);
CREATE INDEX IF NOT EXISTS marks_run ON run_marks(run_id, id);
CREATE INDEX IF NOT EXISTS changes_run ON run_changes(run_id, field, id);
-- The claim: a second runner inserting the same attempt of an instance gets LedgerConflict.
CREATE UNIQUE INDEX IF NOT EXISTS attempts_claim ON attempts(run_id, instance_id, attempt_no);
"""

TABLES += RUNNER_TABLES
TABLES += OWNER_TABLES


# The views spell no word of the vocabulary themselves: each is put in from base/vocab.py, whose
# sets are the retry rule the runner follows too.
VIEWS = f"""
-- Every attempt with its end (if any). ``status`` is '{RUNNING}' until an end row exists;
-- ``resolved`` is the latest verdict that has one (an evaluation that could not run has NULL).
DROP VIEW IF EXISTS attempt_view;
CREATE VIEW attempt_view AS
SELECT a.attempt_id, a.run_id, a.instance_id, a.attempt_no, a.started_at, a.agent, a.sandbox_path,
       a.life_id AS start_life_id,
       COALESCE(e.life_id, a.life_id) AS life_id,
       a.age_seconds AS start_age_seconds, a.age_requests AS start_age_requests,
       a.age_tokens AS start_age_tokens,
       e.ended_at, COALESCE(e.status, '{RUNNING}') AS status, COALESCE(e.reason, '') AS reason,
       e.patch, e.steps, e.tokens, e.detail_json,
       e.age_seconds AS end_age_seconds, e.age_requests AS end_age_requests,
       e.age_tokens AS end_age_tokens,
       e.ended_at - a.started_at AS duration,
       (SELECT ev.resolved FROM evaluations ev
         WHERE ev.attempt_id = a.attempt_id AND ev.resolved IS NOT NULL
         ORDER BY ev.id DESC LIMIT 1) AS resolved,
       (SELECT COUNT(*) FROM evaluations ev
         WHERE ev.attempt_id = a.attempt_id AND ev.resolved IS NULL) AS n_eval_errors
FROM attempts a LEFT JOIN attempt_ends e ON e.attempt_id = a.attempt_id;

-- Each attempt's latest verdict (NULL when none) and how many evaluations could not run.
DROP VIEW IF EXISTS attempt_verdicts;
CREATE VIEW attempt_verdicts AS
SELECT a.attempt_id,
       (SELECT ev.resolved FROM evaluations ev
         WHERE ev.attempt_id = a.attempt_id AND ev.resolved IS NOT NULL
         ORDER BY ev.id DESC LIMIT 1) AS resolved,
       (SELECT COUNT(*) FROM evaluations ev
         WHERE ev.attempt_id = a.attempt_id AND ev.resolved IS NULL) AS n_eval_errors
FROM attempts a;

-- The budgets a run works with: run.attempts and run.max_requeues as created, or as the latest
-- run_changes row of the field says (a resume with --attempts N). Ledgers from before
-- max_requeues existed get its default.
DROP VIEW IF EXISTS run_budgets;
CREATE VIEW run_budgets AS
SELECT r.run_id,
       COALESCE((SELECT CAST(c.value_json AS INTEGER) FROM run_changes c
                  WHERE c.run_id = r.run_id AND c.field = 'run.attempts' ORDER BY c.id DESC LIMIT 1),
                r.attempts_max) AS attempts_max,
       COALESCE((SELECT CAST(c.value_json AS INTEGER) FROM run_changes c
                  WHERE c.run_id = r.run_id AND c.field = 'run.max_requeues' ORDER BY c.id DESC LIMIT 1),
                json_extract(r.config_json, '$.run.max_requeues'), 20) AS max_requeues
FROM runs r;

-- Each ended attempt with whether it uses up the instance's budget (vocab's retry rule: BUDGETED,
-- requeued). api_error and harness_error attempts do, except an api_error the server caused
-- (requeued = 1): one a restart or a recycle ended (reason server_restarted), or one that failed
-- on a server life the supervisor detected as wedged. Those are counted apart, against
-- run.max_requeues: a bad server life must not push innocent instances to infra_failed.
-- run.max_requeues = 0 turns this off (a harness without wedgewatch). interrupted attempts use up
-- neither (the run was stopped, nothing failed).
DROP VIEW IF EXISTS attempt_budget;
CREATE VIEW attempt_budget AS
SELECT a.attempt_id, a.run_id, a.instance_id, e.status, e.reason,
       CASE WHEN e.status = '{API_ERROR}'
              AND (SELECT rb.max_requeues FROM run_budgets rb WHERE rb.run_id = a.run_id) > 0
              AND (e.reason IN ({sql_list(REQUEUE_REASONS)}) OR EXISTS (
              SELECT 1 FROM events ev WHERE ev.kind IN ({sql_list(REQUEUE_KINDS)})
                AND ev.life_id = COALESCE(e.life_id, a.life_id)))
            THEN 1 ELSE 0 END AS requeued
FROM attempts a JOIN attempt_ends e ON e.attempt_id = a.attempt_id;

-- One row per instance of each run (run_instances is the denominator). The first model-side
-- attempt (submitted or early_stop) decides the outcome; there is at most one, because the
-- runner never starts another attempt after it. Budgeted attempts (attempt_budget) use up
-- run_budgets.attempts_max, requeued ones run_budgets.max_requeues. A submitted patch whose
-- evaluation could not run attempts_max times is infra_failed too. Subqueries are correlated on
-- (run_id, instance_id) so that asking about one instance reads only that instance's rows (index
-- attempts_run).
DROP VIEW IF EXISTS instance_outcomes;
CREATE VIEW instance_outcomes AS
WITH per AS (
  SELECT ri.run_id, ri.instance_id, ri.position, rb.attempts_max, rb.max_requeues,
    (SELECT a.attempt_id FROM attempts a JOIN attempt_ends e ON e.attempt_id = a.attempt_id
      WHERE a.run_id = ri.run_id AND a.instance_id = ri.instance_id
        AND e.status IN ({sql_list(MODEL_SIDE)})
      ORDER BY a.attempt_no LIMIT 1) AS final_attempt,
    (SELECT COUNT(*) FROM attempts a
      WHERE a.run_id = ri.run_id AND a.instance_id = ri.instance_id) AS n_attempts,
    (SELECT MAX(a.attempt_no) FROM attempts a
      WHERE a.run_id = ri.run_id AND a.instance_id = ri.instance_id) AS last_attempt_no,
    (SELECT COUNT(*) FROM attempt_budget b
      WHERE b.run_id = ri.run_id AND b.instance_id = ri.instance_id
        AND b.status IN ({sql_list(BUDGETED)}) AND b.requeued = 0) AS n_infra,
    (SELECT COUNT(*) FROM attempt_budget b
      WHERE b.run_id = ri.run_id AND b.instance_id = ri.instance_id AND b.requeued = 1) AS n_requeued,
    (SELECT COUNT(*) FROM attempts a JOIN attempt_ends e ON e.attempt_id = a.attempt_id
      WHERE a.run_id = ri.run_id AND a.instance_id = ri.instance_id
        AND e.status = '{API_ERROR}') AS n_api_error,
    (SELECT COUNT(*) FROM attempts a JOIN attempt_ends e ON e.attempt_id = a.attempt_id
      WHERE a.run_id = ri.run_id AND a.instance_id = ri.instance_id
        AND e.status = '{INTERRUPTED}') AS n_interrupted,
    (SELECT COUNT(*) FROM attempts a LEFT JOIN attempt_ends e ON e.attempt_id = a.attempt_id
      WHERE a.run_id = ri.run_id AND a.instance_id = ri.instance_id
        AND e.attempt_id IS NULL) AS n_running
  FROM run_instances ri JOIN run_budgets rb ON rb.run_id = ri.run_id
)
SELECT per.run_id, per.instance_id, per.position, per.attempts_max, per.max_requeues, per.n_attempts,
       COALESCE(per.last_attempt_no, 0) AS last_attempt_no,
       per.n_infra, per.n_requeued, per.n_api_error, per.n_interrupted, per.n_running,
       per.final_attempt, fe.status AS final_status, fe.reason AS final_reason,
       fv.resolved, COALESCE(fv.n_eval_errors, 0) AS n_eval_errors,
       CASE
         WHEN fe.status = '{EARLY_STOP}' THEN '{EARLY_STOP}'
         WHEN fe.status = '{SUBMITTED}'
              AND TRIM(COALESCE(fe.patch, ''), ' ' || char(9) || char(10) || char(13)) = ''
           THEN '{EMPTY_PATCH}'
         WHEN fe.status = '{SUBMITTED}' AND fv.resolved = 1 THEN '{RESOLVED}'
         WHEN fe.status = '{SUBMITTED}' AND fv.resolved = 0 THEN '{UNRESOLVED}'
         WHEN fe.status = '{SUBMITTED}' AND fv.n_eval_errors >= per.attempts_max THEN '{INFRA_FAILED}'
         WHEN fe.status = '{SUBMITTED}' THEN '{PENDING}'
         WHEN per.n_running > 0 THEN '{PENDING}'
         WHEN per.n_infra >= per.attempts_max THEN '{INFRA_FAILED}'
         WHEN per.max_requeues > 0 AND per.n_requeued >= per.max_requeues THEN '{INFRA_FAILED}'
         ELSE '{PENDING}'
       END AS outcome
FROM per
LEFT JOIN attempt_ends fe ON fe.attempt_id = per.final_attempt
LEFT JOIN attempt_verdicts fv ON fv.attempt_id = per.final_attempt;

-- What the runner does next for each instance: NULL once the outcome is final; '{RUNNING}' while an
-- attempt has no end (only seen from outside the runner, or before a resume marks it
-- interrupted); 'evaluate' for a submitted patch without a verdict; else 'attempt', numbered
-- next_attempt_no. This is the whole retry policy as a query: a resume is "run what this says".
DROP VIEW IF EXISTS instance_next;
CREATE VIEW instance_next AS
SELECT run_id, instance_id, position, outcome,
       CASE
         WHEN outcome != '{PENDING}' THEN NULL
         WHEN n_running > 0 THEN '{RUNNING}'
         WHEN final_attempt IS NOT NULL THEN 'evaluate'
         ELSE 'attempt'
       END AS next_action,
       final_attempt,
       last_attempt_no + 1 AS next_attempt_no
FROM instance_outcomes;

DROP VIEW IF EXISTS server_life_view;
CREATE VIEW server_life_view AS
SELECT l.*, r.ready_at, r.ready_seconds, r.warmup_json,
       e.ended_at, e.end_reason, e.exit_code, e.age_seconds, e.age_requests, e.age_tokens,
       COALESCE(e.ended_at, (SELECT MAX(q.started_at + q.duration) FROM requests q
                             WHERE q.life_id = l.life_id)) - l.started_at AS seconds_alive
FROM server_lives l
LEFT JOIN server_life_ready r ON r.life_id = l.life_id
LEFT JOIN server_life_ends e ON e.life_id = l.life_id;
"""
