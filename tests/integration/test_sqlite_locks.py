"""A write lock held by someone else: reads go on, writes wait, then fail cleanly."""

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from taskloom.engine.errors import DatabaseBusyError
from taskloom.engine.manager import TaskManager
from taskloom.persistence.sqlite import SqliteSettings, SqliteTaskStore


async def test_a_write_lock_held_too_long_fails_the_write_in_one_line_and_costs_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.db"
    settings = SqliteSettings(path=path, busy_timeout_ms=0, lock_retry_s=0.2)
    async with SqliteTaskStore.open(settings) as store:
        manager = TaskManager(store)
        kept = await manager.create("kept", {})
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
            with pytest.raises(DatabaseBusyError) as caught:
                await manager.create("blocked", {})
            assert (await manager.get(kept.id)).id == kept.id  # reads do not wait
            other.execute("ROLLBACK")
        message = str(caught.value)
        assert str(path) in message
        assert "locked" in message
        assert "\n" not in message
        after = await manager.create("after", {})
        names = sorted(task.name for task in (await manager.list()).tasks)
    assert names == ["after", "kept"]  # the refused write left nothing behind
    assert after.version == 1
