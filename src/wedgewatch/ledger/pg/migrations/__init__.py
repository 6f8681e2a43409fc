"""Alembic's migrations of the ledger on PostgreSQL, one per schema version from 5 on."""

# The newest revision in versions/: a database already there is opened without importing Alembic
# (tests/test_ledger_pg.py checks this is the scripts' head).
HEAD = "0007"
