"""The ledger on PostgreSQL (the ``postgres`` extra): SQLAlchemy Core on psycopg 3, the schema
kept by Alembic migrations shipped here, the views ported from ``ledger/schema.py``."""
