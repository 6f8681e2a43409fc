"""Alembic's environment for the ledger: always run in-process by ``PgLedger`` on its own
connection (``config.attributes["connection"]``), never from an alembic.ini."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
