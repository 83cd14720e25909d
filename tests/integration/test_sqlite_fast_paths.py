"""The SQLite store's fast paths: bookkeeping writes without their own fsync, point reads
without a thread hop."""

import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from taskloom.engine.errors import TaskStateError
from taskloom.engine.manager import TaskManager
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.persistence.sqlite.settings import SqliteSettings

pytestmark = pytest.mark.anyio

_LEVELS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def _level(raw: sqlite3.Connection) -> str:
    return _LEVELS[raw.execute("PRAGMA synchronous").fetchone()[0]]


async def test_bookkeeping_alone_commits_at_normal_and_durable_writes_at_the_store_level(
    tmp_path: Path,
) -> None:
    async with SqliteTaskStore.open(tmp_path / "t.db") as store:
        writer = store.writer
        assert await writer.submit(_level, durable=False) == "NORMAL"
        assert await writer.submit(_level) == "FULL"
        assert await writer.submit(_level, durable=False) == "NORMAL"
        assert (writer.batches, writer.synced_batches) == (3, 1)


async def test_extra_is_kept_for_durable_writes(tmp_path: Path) -> None:
    settings = SqliteSettings(path=tmp_path / "t.db", synchronous="EXTRA")
    async with SqliteTaskStore.open(settings) as store:
        assert await store.writer.submit(_level) == "EXTRA"
        assert await store.writer.submit(_level, durable=False) == "NORMAL"


async def test_a_failed_batch_does_not_leave_the_next_durable_write_unsynced(
    tmp_path: Path,
) -> None:
    def broken(raw: sqlite3.Connection) -> None:
        raw.execute("INSERT INTO no_such_table VALUES (1)")

    async with SqliteTaskStore.open(tmp_path / "t.db") as store:
        with pytest.raises(Exception, match="no_such_table"):
            await store.writer.submit(broken, durable=False)
        assert await store.writer.submit(_level) == "FULL"
        assert await store.writer.submit(_level, durable=False) == "NORMAL"


async def test_bookkeeping_is_in_the_file_at_once_for_every_other_connection(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"

    def note(raw: sqlite3.Connection) -> None:
        raw.execute("CREATE TABLE IF NOT EXISTS notes (x)")
        raw.execute("INSERT INTO notes VALUES (1)")

    async with SqliteTaskStore.open(path) as store:
        await store.writer.submit(note, durable=False)
        other = sqlite3.connect(path)  # another process would read the same WAL
        try:
            assert other.execute("SELECT count(*) FROM notes").fetchone()[0] == 1
        finally:
            other.close()


class _Locked:
    """Stands in for the point-read connection while another process holds the file."""

    def execute(self, *args: object) -> None:
        error = sqlite3.OperationalError("database is locked")
        error.sqlite_errorcode = sqlite3.SQLITE_BUSY
        raise error


async def test_a_point_read_that_finds_the_file_locked_goes_to_the_reader_thread(
    tmp_path: Path,
) -> None:
    async with SqliteTaskStore.open(tmp_path / "t.db") as store:
        manager = TaskManager(store)
        task = await manager.create("echo", {"x": 1})
        store._inline = _Locked()  # type: ignore[assignment]
        assert (await manager.get(task.id)).id == task.id


async def test_bookkeeping_runs_on_the_loop_thread_unless_another_process_holds_the_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"

    def note(raw: sqlite3.Connection) -> int:
        raw.execute("CREATE TABLE IF NOT EXISTS notes (x)")
        raw.execute("INSERT INTO notes VALUES (1)")
        return threading.get_ident()

    async with SqliteTaskStore.open(path) as store:
        assert await store.writer.submit(note, durable=False) == threading.get_ident()
        other = sqlite3.connect(path, isolation_level=None)  # as another process would
        try:
            other.execute("BEGIN IMMEDIATE")  # holds the write lock
            thread_id: int | None = None

            async def bookkeeping() -> None:
                nonlocal thread_id
                thread_id = await store.writer.submit(note, durable=False)

            with anyio.fail_after(20):
                async with anyio.create_task_group() as task_group:
                    task_group.start_soon(bookkeeping)
                    await anyio.wait_all_tasks_blocked()
                    assert thread_id is None  # waiting for the lock, off the loop
                    other.execute("COMMIT")
            assert thread_id is not None
            assert thread_id != threading.get_ident()
        finally:
            other.close()
        count = await store.writer.submit(
            lambda raw: raw.execute("SELECT count(*) FROM notes").fetchone()[0]
        )
        assert count == 2


async def test_a_stretch_of_inline_bookkeeping_is_checkpointed_from_the_writer_thread(
    tmp_path: Path,
) -> None:
    def note(raw: sqlite3.Connection) -> None:
        raw.execute("CREATE TABLE IF NOT EXISTS notes (x)")
        raw.execute("INSERT INTO notes VALUES (1)")

    async with SqliteTaskStore.open(tmp_path / "t.db") as store:
        writer = store.writer
        writer._checkpoint_every = 3
        for _ in range(7):
            await writer.submit(note, durable=False)
        assert writer.checkpoints == 2
        await writer.submit(note)  # a commit in the writer thread checkpoints as SQLite sees fit
        for _ in range(2):
            await writer.submit(note, durable=False)
        assert writer.checkpoints == 2
        await writer.submit(note, durable=False)  # the third: a checkpoint follows it
        count = await writer.submit(  # the writer takes this once the checkpoint is done
            lambda raw: raw.execute("SELECT count(*) FROM notes").fetchone()[0]
        )
        assert count == 11
        assert writer.checkpoints == 3


@pytest.mark.parametrize("durable", [True, False])
@pytest.mark.parametrize("error", [TaskStateError("refused"), RuntimeError("broke midway")])
async def test_a_write_alone_in_its_batch_that_fails_leaves_nothing(
    tmp_path: Path, durable: bool, error: Exception
) -> None:
    """A batch of one write runs without a savepoint (ADR 0056): a write refused, or
    failing after it has written, rolls the whole transaction back, on the writer thread
    and inline alike; its caller hears the error, and the next batch begins a
    transaction of its own."""

    def failing(raw: sqlite3.Connection) -> None:
        raw.execute("CREATE TABLE scratch (x)")
        raw.execute("INSERT INTO scratch VALUES (1)")
        raise error

    def tables(raw: sqlite3.Connection) -> list[str]:
        found = raw.execute("SELECT name FROM sqlite_schema WHERE name = 'scratch'")
        return [name for (name,) in found]

    async with SqliteTaskStore.open(tmp_path / "t.db") as store:
        with pytest.raises(type(error), match=str(error)):
            await store.writer.submit(failing, durable=durable)
        assert await store.writer.submit(tables, durable=durable) == []
        assert await store.writer.submit(lambda raw: raw.in_transaction, durable=durable)
    raw = sqlite3.connect(tmp_path / "t.db")
    try:
        assert tables(raw) == []
    finally:
        raw.close()
