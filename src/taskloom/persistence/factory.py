"""Choosing the store from what the user wrote: a PostgreSQL URL, or an SQLite file path.

Only opening (or describing) a PostgreSQL database imports its driver, the ``postgres``
extra; without it that is a ``MissingExtraError`` naming the extra.
"""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Protocol

from taskloom.engine.errors import PersistenceError
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import RunStore
from taskloom.engine.tokens import TokenStore
from taskloom.persistence.postgres import PostgresSettings, is_postgres_url, store_class
from taskloom.persistence.postgres.extra import require_driver
from taskloom.persistence.sqlite import SqliteSettings, SqliteTaskStore

DatabaseSettings = SqliteSettings | PostgresSettings


class DurableStore(TaskStore, RunStore, TokenStore, Protocol):
    """A store of tasks, of their runs and of access tokens."""

    def on_back(self, wake_up: Callable[[], None]) -> None:
        """Call *wake_up* whenever the database answers again after an outage."""
        ...


def database_settings(
    target: str | Path | DatabaseSettings, *, store_wait_s: float | None = None
) -> DatabaseSettings:
    """The settings for *target*: ``postgresql://...`` is PostgreSQL, anything else a file;
    *store_wait_s*, if given, is the store's wait (ADR 0038).

    Raises:
        PersistenceError: a URL of a database taskloom does not support.
    """
    if isinstance(target, SqliteSettings | PostgresSettings):
        return target
    text = str(target)
    wait = {"store_wait_s": store_wait_s} if store_wait_s is not None else {}
    if is_postgres_url(text):
        return PostgresSettings(url=text, **wait)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise PersistenceError(
            f"unsupported database URL scheme {scheme!r}: give an SQLite file path "
            "or a postgresql:// URL"
        )
    return SqliteSettings(path=Path(text), **wait)


def describe_database(target: str | Path) -> str:
    """*target* for messages: a file path as it is, a PostgreSQL URL without its password.

    Raises:
        PersistenceError: a malformed PostgreSQL URL.
        MissingExtraError: a PostgreSQL URL, and the ``postgres`` extra is not installed.
    """
    text = str(target)
    if not is_postgres_url(text):
        return text
    require_driver()
    from taskloom.persistence.postgres.driver import describe

    return describe(text)


@asynccontextmanager
async def open_store(
    target: str | Path | DatabaseSettings, *, read_only: bool = False
) -> AsyncIterator[DurableStore]:
    """Open the store *target* names (see :func:`database_settings`); close it on exit.
    *read_only* opens a PostgreSQL database without creating or migrating its schema (an
    SQLite file says so in its settings).

    Raises:
        MissingExtraError: a PostgreSQL database, and the ``postgres`` extra is not
            installed.
    """
    settings = database_settings(target)
    if isinstance(settings, PostgresSettings):
        async with store_class().open(settings, read_only=read_only) as postgres_store:
            yield postgres_store
    else:
        async with SqliteTaskStore.open(settings) as sqlite_store:
            yield sqlite_store
