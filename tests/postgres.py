"""A real PostgreSQL for tests: each store lives in its own schema, dropped afterwards.

The server comes from ``TASKLOOM_TEST_POSTGRES_URL`` (default: the local one that
``scripts/ensure-postgres.sh`` starts). When it cannot be reached, tests that need it
fail with the reason; they are never skipped.
"""

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.runs import ClaimedRun
from taskloom.persistence.postgres import PostgresSettings, PostgresTaskStore
from taskloom.persistence.postgres.driver import application_name
from taskloom.testing import FakeClock
from tests.helpers import eventually

DEFAULT_URL: Final = "postgresql://postgres@127.0.0.1:5432/postgres"
TEST_URL: Final = os.environ.get("TASKLOOM_TEST_POSTGRES_URL", DEFAULT_URL)


def require_server() -> str:
    """The test server's URL; fails the calling test if it does not answer."""
    try:
        with psycopg.connect(TEST_URL, connect_timeout=5):
            return TEST_URL
    except psycopg.Error as error:
        reason = str(error).splitlines()[0]
    pytest.fail(
        f"PostgreSQL at {TEST_URL} is unreachable ({reason}); "
        "run scripts/ensure-postgres.sh or set TASKLOOM_TEST_POSTGRES_URL",
        pytrace=False,
    )


def new_schema_name() -> str:
    """A schema name no other test uses."""
    return f"test_{secrets.token_hex(6)}"


async def drop_schema(name: str) -> None:
    """Remove a test's schema and everything in it."""
    async with await psycopg.AsyncConnection.connect(TEST_URL, autocommit=True) as connection:
        await connection.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
        )


def drop_schema_now(name: str) -> None:
    """:func:`drop_schema`, for synchronous fixtures."""
    with psycopg.connect(TEST_URL, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@contextmanager
def private_database() -> Iterator[str]:
    """The URL of a new, empty database on the test server, dropped (``FORCE``) afterwards:
    for processes started with ``--db URL``, which keep their tables in the default schema."""
    require_server()
    name = f"taskloom_{secrets.token_hex(6)}"
    with psycopg.connect(TEST_URL, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlunsplit(urlsplit(TEST_URL)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(TEST_URL, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@asynccontextmanager
async def emptied_store(schema: str) -> AsyncIterator[PostgresTaskStore]:
    """A store on *schema* (created and migrated on first use), emptied first.

    Sharing one schema across a session's tests and deleting its rows costs about a
    tenth of creating and migrating a schema per test.
    """
    async with (
        PostgresTaskStore.open(PostgresSettings(url=TEST_URL, schema_name=schema)) as store,
        await psycopg.AsyncConnection.connect(TEST_URL, autocommit=True) as connection,
    ):
        await connection.execute(
            sql.SQL("DELETE FROM {}").format(sql.Identifier(schema, "tasks"))  # cascades
        )
        for table in ("tokens", "processes"):
            await connection.execute(
                sql.SQL("DELETE FROM {}").format(sql.Identifier(schema, table))
            )
        yield store


@asynccontextmanager
async def fresh_store(**settings: Any) -> AsyncIterator[PostgresTaskStore]:
    """A store on a new schema of its own (skips without a server), dropped at the end;
    *settings* are more of its ``PostgresSettings``."""
    require_server()
    name = new_schema_name()
    try:
        chosen = PostgresSettings(url=TEST_URL, schema_name=name, **settings)
        async with PostgresTaskStore.open(chosen) as opened:
            yield opened
    finally:
        await drop_schema(name)


async def claimed_jobs(
    store: PostgresTaskStore,
    clock: FakeClock,
    count: int = 1,
    *,
    lease_for: timedelta = timedelta(seconds=60),
) -> list[ClaimedRun]:
    """*count* new ``job`` tasks, claimed at once by worker ``w`` for *lease_for*."""
    manager = TaskManager(store, clock=clock)
    for _ in range(count):
        await manager.create("job")
    claimed = await store.claim_runs(
        worker="w",
        workflows=frozenset({"job"}),
        now=clock.now(),
        lease_for=lease_for,
        limit=count,
        start=claim_start(clock.now()),
    )
    assert len(claimed) == count
    return list(claimed)


class RowHold:
    """A row of a store's schema locked by another connection (``holder``, rolled back
    by :meth:`release` or on leaving :func:`row_held`), and an autocommit connection
    (``admin``) that sees which of the store's backends wait for a lock."""

    def __init__(
        self,
        store: PostgresTaskStore,
        holder: psycopg.AsyncConnection[Any],
        admin: psycopg.AsyncConnection[Any],
    ) -> None:
        self._name = application_name(store.origin)
        self.holder = holder
        self.admin = admin

    async def waiting(self) -> list[int]:
        """The process ids of the store's backends that wait for a lock."""
        cursor = await self.admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
            " AND wait_event_type = 'Lock'",
            (self._name,),
        )
        return [pid for (pid,) in await cursor.fetchall()]

    async def one_waits(self) -> bool:
        """Whether a backend of the store waits for a lock."""
        return bool(await self.waiting())

    async def stop_the_waiting(self, how: str = "pg_terminate_backend") -> None:
        """Once one backend of the store waits (bounded by ``eventually``), stop it with
        *how* (``pg_terminate_backend`` or ``pg_cancel_backend``)."""
        await eventually(self.one_waits)
        (pid,) = await self.waiting()
        await self.admin.execute(sql.SQL("SELECT {}(%s)").format(sql.Identifier(how)), (pid,))

    async def release(self) -> None:
        """Let the waiting go on: the holder's transaction rolled back."""
        await self.holder.rollback()


@asynccontextmanager
async def row_held(
    store: PostgresTaskStore, table: str, column: str, key: str, lock: str = "FOR UPDATE"
) -> AsyncIterator[RowHold]:
    """The row of *table* in *store*'s schema whose *column* is *key*, locked with *lock*
    by another connection while inside."""
    query = sql.SQL("SELECT 1 FROM {} WHERE {} = %s " + lock).format(
        sql.Identifier(store.settings.schema_name, table), sql.Identifier(column)
    )
    async with (
        await psycopg.AsyncConnection.connect(TEST_URL) as holder,
        await psycopg.AsyncConnection.connect(TEST_URL, autocommit=True) as admin,
    ):
        await holder.execute(query, (key,))
        yield RowHold(store, holder, admin)
        await holder.rollback()


def statements_sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The first word of every statement psycopg sends from now on (until the test ends)."""
    sent: list[str] = []
    execute = psycopg.AsyncConnection.execute

    async def counted(self: psycopg.AsyncConnection[Any], query: Any, *args: Any, **kw: Any) -> Any:
        sent.append(str(query).split()[0])
        return await execute(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", counted)
    return sent


async def terminate_sessions(store: PostgresTaskStore) -> set[int]:
    """End every server session of *store* (as a server restart or a network cut would);
    their process ids."""
    async with await psycopg.AsyncConnection.connect(TEST_URL, autocommit=True) as connection:
        cursor = await connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (application_name(store.origin),),
        )
        pids = {pid for (pid,) in await cursor.fetchall()}
        for pid in pids:  # one by one: never a side effect inside a WHERE clause
            await connection.execute("SELECT pg_terminate_backend(%s)", (pid,))
        return pids
