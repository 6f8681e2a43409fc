"""Schema 7: which process wrote each open fact. The table request_starts (a request's row when it
is sent upstream, its end being its requests row) and the pid columns of server_lives and
harness_runs, so the next process to open the ledger can close what a SIGKILLed one left open and
stop its servers. Additive, as every migration of the ledger: nothing is dropped or renamed.

Revision ID: 0007
Revises: 0006
"""

from alembic import op

from wedgewatch.ledger.pg.migrations.versions.v0005_schema5 import append_only

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TABLES = """
ALTER TABLE server_lives ADD COLUMN pid_space TEXT;
ALTER TABLE server_lives ADD COLUMN pid_start TEXT;
ALTER TABLE server_lives ADD COLUMN owner_pid BIGINT;
ALTER TABLE server_lives ADD COLUMN owner_pid_space TEXT;
ALTER TABLE server_lives ADD COLUMN owner_pid_start TEXT;
ALTER TABLE harness_runs ADD COLUMN pid BIGINT;
ALTER TABLE harness_runs ADD COLUMN pid_space TEXT;
ALTER TABLE harness_runs ADD COLUMN pid_start TEXT;

CREATE TABLE request_starts (
    request_id TEXT PRIMARY KEY,
    attempt_id TEXT,
    life_id TEXT,
    path TEXT NOT NULL,
    model TEXT,
    client_stream BIGINT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    pid BIGINT,
    pid_space TEXT,
    pid_start TEXT
);

CREATE INDEX request_starts_owner ON request_starts(pid_space, pid);
"""


def upgrade() -> None:
    op.execute(TABLES)
    op.execute(append_only("request_starts"))


def downgrade() -> None:
    raise NotImplementedError("the ledger is append-only: its schema is never taken back")
