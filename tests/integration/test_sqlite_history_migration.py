"""ADR 0036: migrating a schema-6 SQLite file to 7 gives each stored task one history
row, its state at migration (cause ``migrated``); later writes append to it."""

import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

from taskloom.engine.history import Cause
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import SqliteTaskStore, rows, schema
from taskloom.testing import FakeClock

BEFORE_HISTORY = 6


def _schema_6_file(path: Path, task: Task) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        for _, sql in schema.migrations()[:BEFORE_HISTORY]:
            raw.executescript(sql)
        raw.execute(f"PRAGMA user_version = {BEFORE_HISTORY:d}")
        raw.execute(f"PRAGMA application_id = {schema.APPLICATION_ID:d}")
        row = rows.insert_row(task)  # schema 6 has no workflow_version column (schema 8)
        raw.execute(
            "INSERT INTO tasks (id, name, owner, state, version, updated_at, expires_at,"
            " idempotency_key, parent_id, created_us, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*row[:10], row[11]),
        )


async def test_a_task_stored_before_the_history_gets_one_migrated_row(tmp_path: Path) -> None:
    clock = FakeClock()
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    task = Task(
        id=TaskId("a" * 22),
        name="job",
        arguments={},
        owner=None,
        state=TaskState.RUNNING,
        status_message="half way",
        created_at=moment,
        updated_at=moment,
        ttl_ms=None,
        version=4,
    )
    path = tmp_path / "old.db"
    _schema_6_file(path, task)
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store, clock=clock)
        _, entries = await manager.history(task.id)
        assert [(e.version, e.at, e.state, e.status_message, e.cause) for e in entries] == [
            (4, moment, TaskState.RUNNING, "half way", Cause.MIGRATED)
        ]
        await manager.cancel(task.id)
        _, entries = await manager.history(task.id)
        assert [entry.cause for entry in entries] == [Cause.MIGRATED, Cause.CANCELLED]
