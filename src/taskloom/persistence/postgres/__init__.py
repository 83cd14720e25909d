"""The PostgreSQL store: many servers and workers sharing one database (ADR 0009)."""

from taskloom.persistence.postgres.settings import PostgresSettings, is_postgres_url
from taskloom.persistence.postgres.store import PostgresTaskStore

__all__ = ("PostgresSettings", "PostgresTaskStore", "is_postgres_url")
