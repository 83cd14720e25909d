"""Opening SQLite read-only: nothing is created or written, and a lock is a bounded wait."""

import logging
import os
import sqlite3
import stat
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest

from taskloom.engine.errors import DatabaseBusyError, PersistenceError, SchemaVersionError
from taskloom.engine.manager import TaskManager
from taskloom.persistence.sqlite import SqliteSettings, SqliteTaskStore


async def _database(path: Path) -> str:
    async with SqliteTaskStore.open(path) as store:
        return (await TaskManager(store).create("kept", {})).id


def _read_only(path: Path, **changes: Any) -> SqliteSettings:
    return SqliteSettings(path=path, read_only=True, **changes)


async def test_a_read_only_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    task_id = await _database(path)
    path.chmod(stat.S_IRUSR)
    try:
        async with SqliteTaskStore.open(_read_only(path)) as store:
            manager = TaskManager(store)
            assert (await manager.get(task_id)).name == "kept"
            with pytest.raises(PersistenceError, match="readonly"):
                await manager.create("refused", {})
    finally:
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)


async def test_a_missing_file_or_folder_is_refused_and_not_created(tmp_path: Path) -> None:
    for path in (tmp_path / "none.db", tmp_path / "no" / "such" / "folder" / "tasks.db"):
        with pytest.raises(PersistenceError, match=f"no taskloom database at {path}"):
            async with SqliteTaskStore.open(_read_only(path)):
                pass
    assert os.listdir(tmp_path) == []


async def test_a_schema_behind_is_refused_not_migrated(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    await _database(path)
    with closing(sqlite3.connect(path)) as raw:
        raw.execute("PRAGMA user_version = 1")
    with pytest.raises(SchemaVersionError, match="taskloom db migrate"):
        async with SqliteTaskStore.open(_read_only(path)):
            pass
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 1


async def test_reads_go_on_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    task_id = await _database(path)
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        other.execute("DELETE FROM tasks")
        with anyio.fail_after(2):
            async with SqliteTaskStore.open(_read_only(path)) as store:
                assert (await TaskManager(store).get(task_id)).name == "kept"
        other.execute("ROLLBACK")


async def test_an_exclusive_lock_is_a_bounded_wait_then_one_line(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    await _database(path)
    settings = _read_only(path, busy_timeout_ms=100, lock_retry_s=0.3)
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("PRAGMA locking_mode = EXCLUSIVE")
        other.execute("BEGIN EXCLUSIVE")
        other.execute("DELETE FROM tasks")
        with anyio.fail_after(3), pytest.raises(DatabaseBusyError) as caught:
            async with SqliteTaskStore.open(settings):
                pass
        other.execute("ROLLBACK")
    message = str(caught.value)
    assert message.startswith(f"the database {path} is locked by another process")
    assert "\n" not in message


async def test_a_read_only_store_tells_an_outage_and_its_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Reads are all a read-only store does (``taskloom ui`` on a read-only file), so they
    say when the database goes and when it is back (ADR 0038)."""
    caplog.set_level(logging.INFO, logger="taskloom.store")
    path = tmp_path / "tasks.db"
    task_id = await _database(path)
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        # a rollback journal: a writer's exclusive lock keeps readers out (WAL would not)
        raw.execute("PRAGMA journal_mode = DELETE")
    settings = _read_only(path, store_wait_s=0.4, busy_timeout_ms=100)
    async with SqliteTaskStore.open(settings) as store:
        manager = TaskManager(store)
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN EXCLUSIVE")
            other.execute("DELETE FROM tasks")
            with anyio.fail_after(3), pytest.raises(DatabaseBusyError):
                await manager.get(task_id)
            other.execute("ROLLBACK")
        assert (await manager.get(task_id)).name == "kept"
    lines = [
        (record.levelno, record.getMessage())
        for record in caplog.records
        if record.name == "taskloom.store"
    ]
    assert [level for level, _ in lines] == [logging.WARNING, logging.INFO], lines
    assert f"SQLite database {path} is unavailable (OperationalError)" in lines[0][1]
    assert "is back after an outage of" in lines[1][1]
