"""The PostgreSQL store: many servers and workers sharing one database (ADR 0009).

The driver (psycopg and its pool: the ``postgres`` extra) loads only when a store is
opened, so SQLite users neither install nor import it (ADR 0022). ``PostgresTaskStore``
is imported on first use; without the extra that use raises ``MissingExtraError``.
"""

from typing import TYPE_CHECKING, Any

from taskloom.persistence.postgres.settings import PostgresSettings, is_postgres_url

if TYPE_CHECKING:
    from taskloom.persistence.postgres.store import PostgresTaskStore

__all__ = ("PostgresSettings", "PostgresTaskStore", "is_postgres_url", "store_class")


def store_class() -> "type[PostgresTaskStore]":
    """The store class, importing the driver.

    Raises:
        MissingExtraError: psycopg or psycopg-pool is not installed.
    """
    from taskloom.persistence.postgres.extra import require_driver

    require_driver()
    from taskloom.persistence.postgres.store import PostgresTaskStore

    return PostgresTaskStore


def __getattr__(name: str) -> Any:
    if name == "PostgresTaskStore":
        return store_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
