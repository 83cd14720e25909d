"""SQLite files written by an older taskloom, for the migration tests: the schema's
first migrations applied by hand, then rows inserted as that schema takes them."""

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path

from taskloom.engine.models import Task, TaskId
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import rows, schema

FIRST_WITH_VERSIONS = 8
"""The schema that added ``tasks.workflow_version`` (ADR 0039)."""
STORED_AT = datetime(2026, 1, 2, tzinfo=UTC)


def stored_task(
    task_id: str,
    *,
    name: str = "flow",
    state: TaskState = TaskState.QUEUED,
    version: int = 1,
    workflow_version: str | None = None,
) -> Task:
    """A task as an older file holds it, created and last written at :data:`STORED_AT`."""
    return Task(
        id=TaskId(task_id),
        name=name,
        arguments={},
        owner=None,
        state=state,
        created_at=STORED_AT,
        updated_at=STORED_AT,
        ttl_ms=None,
        workflow_version=workflow_version,
        version=version,
    )


@contextmanager
def file_at(path: Path, version: int) -> Iterator[sqlite3.Connection]:
    """A new file at *path* with the schema of *version* (its first *version*
    migrations, its ``user_version`` and taskloom's ``application_id``), its connection
    in autocommit for the caller's rows; closed after."""
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        for _, sql in schema.migrations()[:version]:
            raw.executescript(sql)
        raw.execute(f"PRAGMA user_version = {version:d}")
        raw.execute(f"PRAGMA application_id = {schema.APPLICATION_ID:d}")
        yield raw


def insert_task(raw: sqlite3.Connection, version: int, task: Task) -> None:
    """Store *task* in a file of schema *version* (before schema 8, without the
    workflow version's column)."""
    row = rows.insert_row(task)
    if version >= FIRST_WITH_VERSIONS:
        raw.execute(rows.INSERT_SQL, row)
        return
    raw.execute(
        "INSERT INTO tasks (id, name, owner, state, version, updated_at, expires_at,"
        " idempotency_key, parent_id, created_us, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*row[:10], row[11]),
    )
