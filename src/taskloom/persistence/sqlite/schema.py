"""Recognising a taskloom database and migrating it with numbered SQL files."""

import logging
import sqlite3
from pathlib import Path
from typing import Final

from taskloom.engine.errors import CorruptDatabaseError, ForeignDatabaseError, SchemaVersionError
from taskloom.persistence.migrations import numbered_migrations

APPLICATION_ID: Final = 0x544C4F4D  # "TLOM" in the database header
SCHEMA_EDIT: Final = "PRAGMA writable_schema = ON;"
"""A migration's statement that starts an edit of the schema's text in place (ADR 0054)."""

logger = logging.getLogger("taskloom.store")


def migrations() -> tuple[tuple[int, str], ...]:
    """Every migration as ``(number, sql)``, numbered 1, 2, 3... without gaps."""
    return numbered_migrations("taskloom.persistence.sqlite")


def latest_version() -> int:
    """The schema version this taskloom writes."""
    return len(migrations())


def check_identity(raw: sqlite3.Connection, path: Path) -> None:
    """Refuse a database that some other application made.

    Raises:
        ForeignDatabaseError: the file holds tables but is not marked as taskloom's.
        sqlite3.DatabaseError: the file is not a database (translated by the caller).
    """
    # One statement, so one snapshot: another process may be creating the schema now.
    application_id, objects = raw.execute(
        "SELECT (SELECT application_id FROM pragma_application_id()),"
        " (SELECT count(*) FROM sqlite_master)"
    ).fetchone()
    if application_id == APPLICATION_ID:
        return
    if application_id != 0 or objects:
        raise ForeignDatabaseError(
            f"{path} is an SQLite database of another application, not taskloom's; "
            "point taskloom at a new file"
        )


def check_integrity(raw: sqlite3.Connection, path: Path) -> None:
    """Refuse a damaged file (SQLite's ``quick_check``, which reads the whole file once).

    Raises:
        CorruptDatabaseError: the check found a problem.
        sqlite3.DatabaseError: the damage stopped the check itself (translated by the caller).
    """
    found = [row[0] for row in raw.execute("PRAGMA quick_check(1)")]
    if found != ["ok"]:
        lines = [line for line in "\n".join(map(str, found)).splitlines() if "***" not in line]
        problem = lines[0] if lines else "unknown damage"
        raise CorruptDatabaseError(f"{path} is not a readable taskloom database: {problem}")


def check_version(raw: sqlite3.Connection, path: Path) -> int:
    """The stored schema version, if this taskloom understands it.

    Raises:
        SchemaVersionError: the database was written by a newer taskloom.
    """
    current: int = raw.execute("PRAGMA user_version").fetchone()[0]
    latest = latest_version()
    if current > latest:
        raise SchemaVersionError(
            f"{path} has schema version {current}, newer than this taskloom "
            f"understands ({latest}); upgrade taskloom"
        )
    return current


def migrate(raw: sqlite3.Connection, path: Path) -> int:
    """Bring the schema up to date in one write transaction; return the version.

    An up-to-date database is not written to.

    Raises:
        SchemaVersionError: the database was written by a newer taskloom.
    """
    raw.execute("BEGIN IMMEDIATE")
    try:
        check_identity(raw, path)  # again, now under the write lock
        current = check_version(raw, path)
        latest = latest_version()
        for number, sql in migrations()[current:]:
            _run(raw, path, number, sql)
            raw.execute(f"PRAGMA user_version = {number:d}")
        if current < latest:
            raw.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")
        raw.execute("COMMIT")
    except BaseException:
        raw.execute("ROLLBACK")
        raise
    return max(current, latest)


def _run(raw: sqlite3.Connection, path: Path, number: int, sql: str) -> None:
    """Run migration *number*'s statements.

    A migration may edit the schema's text in place (SQLite's documented procedure) only
    to write a rule in another form that allows the same rows (ADR 0054). Where SQLite
    refuses writes to its schema (``SQLITE_DBCONFIG_DEFENSIVE``), the rest of such a
    migration is skipped, with a warning, and the former text stays.
    """
    for statement in _statements(sql):
        raw.execute(statement)
        if statement.endswith(SCHEMA_EDIT) and not _schema_writable(raw):
            raw.execute("PRAGMA writable_schema = OFF")
            logger.warning(
                "%s: SQLite refuses edits of its schema here (defensive mode): schema %d "
                "keeps the former text of its constraints (the same rule, checked more "
                "slowly)",
                path,
                number,
            )
            return


def _schema_writable(raw: sqlite3.Connection) -> bool:
    """Whether SQLite lets this connection write its schema's text: defensive mode
    refuses such an update when it is prepared, whatever ``writable_schema`` says."""
    try:
        raw.execute("UPDATE sqlite_schema SET sql = sql WHERE 0")
    except sqlite3.OperationalError:
        return False
    return True


def _statements(sql: str) -> list[str]:
    """Split a migration file into complete statements."""
    statements: list[str] = []
    pending = ""
    for line in sql.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip() and not all(
        part.strip().startswith("--") or not part.strip() for part in pending.splitlines()
    ):
        raise RuntimeError(f"incomplete statement in migration: {pending.strip()[:60]}")
    return statements
