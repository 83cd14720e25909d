"""Files the SQLite store must refuse, or accept, and what it leaves of them.

A damaged file, another application's database and a database of a newer taskloom are
each refused with the engine's error, in one line that names the file, and are left
byte for byte as they were (no journal switch, no migration, no stray files). An empty
file and a path in a missing folder are treated as a new database.
"""

import hashlib
import random
import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from taskloom.engine.errors import (
    CorruptDatabaseError,
    ForeignDatabaseError,
    PersistenceError,
    SchemaVersionError,
)
from taskloom.engine.manager import TaskManager
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import SqliteSettings, SqliteTaskStore, schema
from taskloom.persistence.sqlite.schema import APPLICATION_ID, latest_version

Damage = Callable[[Path], None]


async def _real_database(path: Path, tasks: int = 150) -> None:
    """A closed taskloom database of several pages (its WAL folded back into the file)."""
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store)
        for number in range(tasks):
            task = await manager.create("fill", {"n": number, "pad": "x" * 300})
            await manager.start(task.id)
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def _fingerprint(folder: Path) -> dict[str, str]:
    """Every file in *folder* with the hash of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def _random_bytes(size: int) -> bytes:
    return random.Random(size).randbytes(size)


def _page_size(path: Path) -> int:
    size = int.from_bytes(path.read_bytes()[16:18], "big")
    return 65536 if size == 1 else size


def _overwrite_pages(path: Path, pages: list[int]) -> None:
    """Overwrite whole pages (numbered from 1, as SQLite does) with random bytes."""
    page_size = _page_size(path)
    data = bytearray(path.read_bytes())
    for page in pages:
        data[(page - 1) * page_size : page * page_size] = _random_bytes(page_size)
    path.write_bytes(bytes(data))


def _root_pages(path: Path, kind: str, name: str = "%") -> list[int]:
    """The root pages of the tables or indexes (*kind*) whose name is like *name*."""
    with closing(sqlite3.connect(path)) as raw:
        found = raw.execute(
            "SELECT rootpage FROM sqlite_master"
            " WHERE type = ? AND name LIKE ? AND rootpage > 1 ORDER BY name",
            (kind, name),
        ).fetchall()
    return [page for (page,) in found]


def _random_file(path: Path) -> None:
    path.write_bytes(_random_bytes(8192))


def _truncated_to_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _truncated_inside_the_first_page(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:1000])


def _header_overwritten(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(_random_bytes(100) + data[100:])


def _index_pages_overwritten(path: Path) -> None:
    _overwrite_pages(path, _root_pages(path, "index"))


def _table_root_overwritten(path: Path) -> None:
    _overwrite_pages(path, _root_pages(path, "table", "tasks"))


DAMAGES: dict[str, Damage] = {
    "random bytes": _random_file,
    "truncated to half": _truncated_to_half,
    "truncated inside the first page": _truncated_inside_the_first_page,
    "header overwritten": _header_overwritten,
    "index pages overwritten": _index_pages_overwritten,
    "root page of the tasks table overwritten": _table_root_overwritten,
}


async def _refused(path: Path, settings: SqliteSettings | None = None) -> PersistenceError:
    """Open *path*, expecting a refusal; the error, after checking that nothing changed."""
    before = _fingerprint(path.parent)
    with pytest.raises(PersistenceError) as caught:
        async with SqliteTaskStore.open(settings or path):
            pass
    assert _fingerprint(path.parent) == before
    message = str(caught.value)
    assert str(path) in message
    assert "\n" not in message
    return caught.value


@pytest.mark.parametrize("damage", DAMAGES)
async def test_a_damaged_file_is_refused_and_left_as_it_is(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "tasks.db"
    await _real_database(path)
    DAMAGES[damage](path)
    error = await _refused(path)
    assert isinstance(error, CorruptDatabaseError)
    assert "is not a readable taskloom database" in str(error)


async def test_damage_found_after_opening_without_the_check_refuses_writes_cleanly(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.db"
    await _real_database(path)
    _index_pages_overwritten(path)
    before = _fingerprint(tmp_path)
    settings = SqliteSettings(path=path, verify_on_open=False)
    async with SqliteTaskStore.open(settings) as store:
        manager = TaskManager(store)
        with pytest.raises(
            CorruptDatabaseError, match="is not a readable taskloom database"
        ) as caught:
            await manager.create("more", {})
        assert str(path) in str(caught.value)
        assert "\n" not in str(caught.value)
    assert _fingerprint(tmp_path) == before


@pytest.mark.parametrize("application_id", [0, 0x12345678])
async def test_another_applications_database_is_refused_and_left_as_it_is(
    tmp_path: Path, application_id: int
) -> None:
    path = tmp_path / "theirs.db"
    with closing(sqlite3.connect(path)) as raw:
        raw.execute(f"PRAGMA application_id = {application_id:d}")
        raw.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        raw.execute("INSERT INTO customers (name) VALUES ('Ada')")
        raw.commit()
    error = await _refused(path)
    assert isinstance(error, ForeignDatabaseError)
    assert "another application" in str(error)


async def test_an_empty_database_of_another_application_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "theirs.db"
    with closing(sqlite3.connect(path)) as raw:
        raw.execute("PRAGMA application_id = 42")
        raw.execute("VACUUM")  # writes the header, with no table
    error = await _refused(path)
    assert isinstance(error, ForeignDatabaseError)


@pytest.mark.parametrize("journal_mode", ["WAL", "DELETE"])
async def test_a_database_of_a_newer_taskloom_is_refused_and_left_as_it_is(
    tmp_path: Path, journal_mode: str
) -> None:
    path = tmp_path / "tasks.db"
    await _real_database(path, tasks=3)
    newer = latest_version() + 1
    with closing(sqlite3.connect(path)) as raw:
        raw.execute(f"PRAGMA user_version = {newer:d}")
        raw.execute(f"PRAGMA journal_mode = {journal_mode}")
    error = await _refused(path)
    assert isinstance(error, SchemaVersionError)
    assert f"schema version {newer}" in str(error)
    assert "upgrade taskloom" in str(error)


async def test_opening_an_up_to_date_database_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    await _real_database(path, tasks=3)
    before = _fingerprint(tmp_path)
    async with SqliteTaskStore.open(path) as store:
        assert len((await TaskManager(store).list()).tasks) == 3
    assert _fingerprint(tmp_path) == before


async def _usable(path: Path) -> None:
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store)
        task = await manager.create("first", {"ok": True})
        await manager.start(task.id)
    async with SqliteTaskStore.open(path) as store:
        assert (await TaskManager(store).get(task.id)).state is TaskState.RUNNING
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert raw.execute("PRAGMA user_version").fetchone()[0] == latest_version()


async def test_an_empty_file_becomes_a_new_database(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    path.touch()
    await _usable(path)


async def test_a_path_in_missing_folders_creates_them(tmp_path: Path) -> None:
    path = tmp_path / "not" / "there" / "yet" / "tasks.db"
    await _usable(path)


async def test_a_path_under_a_regular_file_is_refused_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder", encoding="utf-8")
    path = blocker / "tasks.db"
    with pytest.raises(PersistenceError) as caught:
        async with SqliteTaskStore.open(path):
            pass
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)
    assert blocker.read_text(encoding="utf-8") == "not a folder"


async def test_a_folder_given_as_the_database_is_refused_in_one_line_and_no_thread_stays(
    tmp_path: Path,
) -> None:
    path = tmp_path / "folder.db"
    path.mkdir()
    threads = _connection_threads()
    with pytest.raises(PersistenceError) as caught:
        async with SqliteTaskStore.open(path):
            pass
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)
    assert list(path.iterdir()) == []
    # The failed connection's thread has ended (it would otherwise outlive the event loop).
    assert _connection_threads() <= threads


def _connection_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "_connection_worker_thread" in t.name}


@pytest.mark.parametrize("before_statement", [1, 2])
def test_a_schema_created_meanwhile_by_another_process_is_not_taken_for_foreign(
    tmp_path: Path, before_statement: int
) -> None:
    """The identity check reads the file in one snapshot: another process that creates
    the schema just before any of its statements must not make the file look foreign."""
    path = tmp_path / "new.db"
    started: list[str] = []
    migrated: list[int] = []
    with (
        closing(sqlite3.connect(path, isolation_level=None)) as raw,
        closing(sqlite3.connect(path, isolation_level=None, timeout=0)) as other,
    ):

        def meanwhile(statement: str) -> None:
            if statement.startswith("--"):
                return  # a statement that SQLite runs inside the current one
            started.append(statement)
            if len(started) == before_statement:
                migrated.append(schema.migrate(other, path))

        raw.set_trace_callback(meanwhile)
        schema.check_identity(raw, path)
        raw.set_trace_callback(None)
    assert migrated == ([latest_version()] if len(started) >= before_statement else [])
