"""Issue 28: once an operation holds a connection, its transaction runs until the
operation's store wait ends (not ``acquire_timeout_s``, which bounds the wait for the
connection only), and a commit cut short by that deadline is reported as an unknown
outcome, never as "nothing was written"."""

from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg import sql

from taskloom.engine.errors import DatabaseUnavailableError, OutcomeUnknownError
from taskloom.persistence.postgres import PostgresSettings
from taskloom.persistence.postgres.driver import Connection, Database
from tests import postgres


@pytest.fixture
async def schema_name() -> AsyncIterator[str]:
    """A schema with a table whose rows make the commit sleep (a deferred trigger)."""
    postgres.require_server()
    name = postgres.new_schema_name()
    async with await psycopg.AsyncConnection.connect(
        postgres.TEST_URL, autocommit=True
    ) as connection:
        for statement in (
            "CREATE SCHEMA {schema}",
            "CREATE TABLE {schema}.notes (sleep_s float NOT NULL)",
            (
                "CREATE FUNCTION {schema}.sleepy() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN PERFORM pg_sleep(NEW.sleep_s); RETURN NULL; END $$"
            ),
            (
                "CREATE CONSTRAINT TRIGGER sleep_at_commit AFTER INSERT ON {schema}.notes "
                "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {schema}.sleepy()"
            ),
        ):
            await connection.execute(sql.SQL(statement).format(schema=sql.Identifier(name)))
    yield name
    await postgres.drop_schema(name)


def _database(schema_name: str, **settings: float) -> Database:
    return Database(
        PostgresSettings(url=postgres.TEST_URL, schema_name=schema_name, **settings),
        "test",
        origin="test",
    )


async def _rows(schema_name: str) -> int:
    async with await psycopg.AsyncConnection.connect(postgres.TEST_URL) as connection:
        cursor = await connection.execute(
            sql.SQL("SELECT count(*) FROM {}.notes").format(sql.Identifier(schema_name))
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def test_a_slow_statement_within_the_store_wait_is_not_cut_at_acquire_timeout(
    schema_name: str,
) -> None:
    async def slow_read(connection: Connection) -> int:
        cursor = await connection.execute("SELECT pg_sleep(0.8), 7")
        row = await cursor.fetchone()
        assert row is not None
        return int(row[1])

    async def slow_write(connection: Connection) -> None:
        await connection.execute("SELECT pg_sleep(0.8)")
        await connection.execute("INSERT INTO notes VALUES (0)")

    database = _database(schema_name, acquire_timeout_s=0.1, store_wait_s=5.0)
    async with database.opened():
        assert await database.read(slow_read) == 7
        await database.transaction(slow_write)
    assert await _rows(schema_name) == 1


async def test_a_commit_cut_short_by_the_store_wait_has_an_unknown_outcome(
    schema_name: str,
) -> None:
    async def write_with_a_slow_commit(connection: Connection) -> None:
        await connection.execute("INSERT INTO notes VALUES (1.5)")  # the commit sleeps 1.5 s

    database = _database(schema_name, store_wait_s=0.5)
    async with database.opened():
        with pytest.raises(OutcomeUnknownError, match="may or may not have landed"):
            await database.transaction(write_with_a_slow_commit)


async def test_work_cut_short_before_its_commit_wrote_nothing(schema_name: str) -> None:
    async def slow_work(connection: Connection) -> None:
        await connection.execute("INSERT INTO notes VALUES (0)")
        await connection.execute("SELECT pg_sleep(1.5)")

    database = _database(schema_name, store_wait_s=0.5)
    async with database.opened():
        with pytest.raises(DatabaseUnavailableError, match=r"did not end within 0\.5 s"):
            await database.transaction(slow_work)
    assert await _rows(schema_name) == 0
