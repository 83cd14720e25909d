"""ADR 0036: migrating a schema-6 SQLite file to 7 gives each stored task one history
row, its state at migration (cause ``migrated``); later writes append to it."""

from datetime import UTC, datetime
from pathlib import Path

from taskloom.engine.history import Cause
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.testing import FakeClock
from tests.sqlite_files import file_at, insert_task

BEFORE_HISTORY = 6


def _schema_6_file(path: Path, task: Task) -> None:
    with file_at(path, BEFORE_HISTORY) as raw:
        insert_task(raw, BEFORE_HISTORY, task)


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
