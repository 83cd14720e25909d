"""The SQLite store: WAL, one group-committing writer connection, numbered migrations."""

from taskloom.persistence.sqlite.settings import SqliteSettings
from taskloom.persistence.sqlite.store import SqliteTaskStore

__all__ = ("SqliteSettings", "SqliteTaskStore")
