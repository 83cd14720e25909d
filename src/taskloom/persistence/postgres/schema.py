"""Recognising taskloom's schema in a PostgreSQL database and migrating it with numbered
SQL files, one transaction for all of them, under an advisory lock."""

from typing import Final

from psycopg import sql

from taskloom.engine.errors import ForeignDatabaseError, SchemaVersionError
from taskloom.persistence.migrations import numbered_migrations
from taskloom.persistence.postgres.driver import Connection

VERSION_TABLE: Final = "taskloom_migrations"
_LOCK_KEY: Final = 0x544C4F4D  # "TLOM": one migrator at a time per schema


def migrations() -> tuple[tuple[int, str], ...]:
    """Every migration as ``(number, sql)``, numbered 1, 2, 3... without gaps."""
    return numbered_migrations("taskloom.persistence.postgres")


def latest_version() -> int:
    """The schema version this taskloom writes."""
    return len(migrations())


async def migrate(connection: Connection, schema: str, database: str) -> int:
    """Create *schema* if needed and bring it up to date in one transaction; return the version.

    Raises:
        ForeignDatabaseError: the schema holds another application's tables.
        SchemaVersionError: the schema was written by a newer taskloom.
        psycopg.Error: the server refused (translated by the caller).
    """
    where = f"schema {schema!r} of {database}"
    async with connection.transaction():
        await connection.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_KEY, schema)
        )
        tables = await _relations(connection, schema)
        if tables is None:
            await connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        elif tables and VERSION_TABLE not in tables:
            raise ForeignDatabaseError(
                f"{where} holds tables of another application, not taskloom's; "
                "choose another schema"
            )
        await connection.execute(
            sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema))
        )
        await connection.execute(
            f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} ("
            " version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = await _version(connection, sql.Identifier(VERSION_TABLE), where)
        latest = latest_version()
        for number, text in migrations()[current:]:
            await connection.execute(text)  # several statements: allowed without parameters
            await connection.execute(
                f"INSERT INTO {VERSION_TABLE} (version) VALUES (%s)", (number,)
            )
    return max(current, latest)


async def check(connection: Connection, schema: str, database: str) -> int:
    """Check, changing nothing, that *schema* holds taskloom's tables at the version this
    taskloom writes (a read-only open cannot create or migrate it); return the version.

    Raises:
        ForeignDatabaseError: the schema holds another application's tables.
        SchemaVersionError: the schema is missing, older or newer than this taskloom's.
        psycopg.Error: the server refused (translated by the caller).
    """
    where = f"schema {schema!r} of {database}"
    upgrade = f"taskloom db migrate --db postgresql://{database}"
    tables = await _relations(connection, schema)
    if not tables:
        raise SchemaVersionError(f"{where} holds no taskloom tables; create them with: {upgrade}")
    if VERSION_TABLE not in tables:
        raise ForeignDatabaseError(
            f"{where} holds tables of another application, not taskloom's; choose another schema"
        )
    current = await _version(connection, sql.Identifier(schema, VERSION_TABLE), where)
    latest = latest_version()
    if current < latest:
        raise SchemaVersionError(
            f"{where} has schema version {current}, older than this taskloom's "
            f"({latest}); upgrade it with: {upgrade}"
        )
    return current


async def _version(connection: Connection, table: sql.Identifier, where: str) -> int:
    """The schema version recorded in *table* (0 if none).

    Raises:
        SchemaVersionError: a newer taskloom wrote it.
    """
    cursor = await connection.execute(
        sql.SQL("SELECT coalesce(max(version), 0) FROM {}").format(table)
    )
    row = await cursor.fetchone()
    current = int(row[0]) if row is not None else 0
    if current > latest_version():
        raise SchemaVersionError(
            f"{where} has schema version {current}, newer than this taskloom "
            f"understands ({latest_version()}); upgrade taskloom"
        )
    return current


async def _relations(connection: Connection, schema: str) -> set[str] | None:
    """The names of the relations in *schema*, or ``None`` if it does not exist."""
    cursor = await connection.execute(
        "SELECT c.relname FROM pg_namespace n"
        " LEFT JOIN pg_class c ON c.relnamespace = n.oid"
        " WHERE n.nspname = %s",
        (schema,),
    )
    found = await cursor.fetchall()
    if not found:
        return None
    return {name for (name,) in found if name is not None}
