"""ADR 0054: schema 9 writes the CHECK constraints of tasks.state, node_runs.state and
node_attempts.outcome as comparisons, editing the schema's text in place. Migrating a
schema-8 file keeps every row and passes SQLite's integrity check; the constraints refuse
what they refused; a node's end no longer builds a temporary index of the allowed values
for each row; a text not found fails the migration; where SQLite refuses edits of its
schema (defensive mode) the former constraints stay."""

import ctypes
import importlib
import logging
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import pytest

from taskloom.engine.runs import AttemptOutcome, NodeState
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import SqliteTaskStore, nodes, schema
from tests.sqlite_files import file_at, insert_task, stored_task

BEFORE_CHECKS = 8
TASK = "a" * 22
DEFENSIVE = 1010  # SQLITE_DBCONFIG_DEFENSIVE


def _schema_8_file(path: Path) -> None:
    task = stored_task(TASK, state=TaskState.RUNNING, version=2)
    with file_at(path, BEFORE_CHECKS) as raw:
        insert_task(raw, BEFORE_CHECKS, task)
        raw.execute(
            "INSERT INTO node_runs VALUES (?, 'a', 'completed', 2, 1, 0, NULL, NULL, '7', NULL, 5)",
            (TASK,),
        )
        raw.execute(
            "INSERT INTO node_runs VALUES (?, 'b', 'waiting', 1, 0, 1, 9, 'input:b#1', NULL,"
            " NULL, 6)",
            (TASK,),
        )
        raw.executemany(
            "INSERT INTO node_attempts VALUES (?, ?, ?, 'w', 1, ?, ?, ?)",
            [
                (TASK, "a", 1, 2, "failed", '{"error_type": "E"}'),
                (TASK, "a", 2, 3, "completed", None),
                (TASK, "b", 1, None, None, None),
            ],
        )


def _orphans(path: Path) -> None:
    """Node rows of a task deleted with foreign keys off (sqlite3's default)."""
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        raw.execute(
            "INSERT INTO node_runs VALUES ('gone', 'a', 'running', 1, 0, 0, NULL, NULL, NULL, NULL, 1)"
        )
        raw.execute("INSERT INTO node_attempts VALUES ('gone', 'a', 1, 'w', 1, NULL, NULL, NULL)")


def _node_rows(path: Path) -> tuple[list[tuple[object, ...]], ...]:
    with closing(sqlite3.connect(path)) as raw:
        tasks = raw.execute("SELECT * FROM tasks ORDER BY seq").fetchall()
        runs = raw.execute("SELECT * FROM node_runs ORDER BY task_id, node").fetchall()
        attempts = raw.execute(
            "SELECT * FROM node_attempts ORDER BY task_id, node, attempt"
        ).fetchall()
    return tasks, runs, attempts


def _checks(raw: sqlite3.Connection) -> str:
    found = raw.execute(
        "SELECT group_concat(sql, ';') FROM sqlite_schema WHERE type = 'table'"
        " AND name IN ('tasks', 'node_runs', 'node_attempts')"
    ).fetchone()[0]
    assert isinstance(found, str)
    return found


def _defensive(raw: sqlite3.Connection) -> None:
    """Turn on SQLITE_DBCONFIG_DEFENSIVE. Python 3.12 and later have ``setconfig``; on
    CPython 3.11 the connection's ``sqlite3*`` is the field after the object's header and
    ``sqlite3_db_config`` is called through ctypes, in the SQLite the sqlite3 module is
    linked with. The test is skipped, never run on a guess, where that cannot be checked."""
    if hasattr(raw, "setconfig"):  # Python 3.12 and later
        raw.setconfig(DEFENSIVE, True)
        return
    if sys.implementation.name != "cpython" or sys.version_info[:2] != (3, 11):
        pytest.skip("a connection's sqlite3* is read at CPython 3.11's offset only")
    try:
        # Looked up from the module's own handle: its SQLite whether linked dynamically
        # (dlsym searches the module's dependencies) or statically and exported; never
        # another copy of the library, whose sqlite3 struct may differ.
        library = ctypes.CDLL(importlib.import_module("_sqlite3").__file__)
        config = library.sqlite3_db_config
        version = library.sqlite3_libversion
        filename = library.sqlite3_db_filename
    except (OSError, AttributeError, TypeError):
        pytest.skip("the sqlite3 module's SQLite cannot be reached through ctypes")
    version.restype = ctypes.c_char_p
    if version() != sqlite3.sqlite_version.encode():
        pytest.skip("ctypes reached another SQLite than the sqlite3 module's")
    handle = ctypes.c_void_p.from_address(id(raw) + object.__basicsize__).value
    filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    filename.restype = ctypes.c_char_p
    assert (
        filename(handle, b"main") == str(raw.execute("PRAGMA database_list").fetchone()[2]).encode()
    )
    config.argtypes = [ctypes.c_void_p, ctypes.c_int]  # the rest variadic (arm64 passes them apart)
    config.restype = ctypes.c_int
    now = ctypes.c_int(-1)
    assert config(handle, DEFENSIVE, ctypes.c_int(1), ctypes.byref(now)) == 0
    assert now.value == 1


async def test_migrating_to_schema_9_keeps_every_row(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _schema_8_file(path)
    before = _node_rows(path)
    async with SqliteTaskStore.open(path):
        pass
    assert _node_rows(path) == before
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == schema.latest_version()
        assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert " IN (" not in _checks(raw)
        assert " IN\n" not in _checks(raw)
        assert raw.execute(
            "SELECT count(*) FROM sqlite_schema WHERE name LIKE 'schema_9%'"
        ).fetchone() == (0,)


async def test_node_rows_of_a_task_gone_do_not_stop_the_migration(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _schema_8_file(path)
    _orphans(path)
    kept = _node_rows(path)
    async with SqliteTaskStore.open(path):
        pass
    assert _node_rows(path) == kept  # in place: nothing copied, nothing dropped


async def test_a_connection_open_before_the_migration_reads_the_new_checks(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    _schema_8_file(path)
    with closing(sqlite3.connect(path, isolation_level=None)) as early:
        assert early.execute("SELECT count(*) FROM node_runs").fetchone() == (2,)
        async with SqliteTaskStore.open(path):
            pass
        assert early.execute("SELECT count(*) FROM node_runs").fetchone() == (2,)
        program = early.execute(
            "EXPLAIN " + nodes.END_ATTEMPT, [None] * nodes.END_ATTEMPT.count("?")
        ).fetchall()
        assert [op for _, op, *_ in program if op == "OpenEphemeral"] == []
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            early.execute("UPDATE node_runs SET state = 'done' WHERE node = 'a'")


def test_a_check_text_not_found_fails_the_migration(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _schema_8_file(path)
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        raw.execute("PRAGMA writable_schema = ON")
        raw.execute(  # the same rule, spelt otherwise: not the text schema 9 replaces
            "UPDATE sqlite_schema SET sql = replace(sql, 'CHECK (state IN (', 'CHECK (state  IN (')"
            " WHERE name = 'node_runs'"
        )
        raw.execute("PRAGMA writable_schema = RESET")
        before = _checks(raw)
        with pytest.raises(sqlite3.IntegrityError, match="IN list was not found"):
            schema.migrate(raw, path)
        assert raw.execute("PRAGMA user_version").fetchone()[0] == BEFORE_CHECKS
        assert _checks(raw) == before
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_defensive_mode_keeps_the_former_checks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "old.db"
    _schema_8_file(path)
    before = _node_rows(path)
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        _defensive(raw)
        former = _checks(raw)
        with caplog.at_level(logging.WARNING, logger="taskloom.store"):
            assert schema.migrate(raw, path) == schema.latest_version()
        assert "defensive mode" in caplog.text
        assert _checks(raw) == former
        assert raw.execute("PRAGMA user_version").fetchone()[0] == schema.latest_version()
        assert raw.execute("PRAGMA writable_schema").fetchone() == (0,)
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            raw.execute("UPDATE node_runs SET state = 'done' WHERE node = 'a'")
    assert _node_rows(path) == before


@pytest.mark.parametrize("old", [False, True], ids=["new-file", "migrated-from-8"])
async def test_the_checks_refuse_what_they_refused(tmp_path: Path, old: bool) -> None:
    path = tmp_path / "db"
    if old:
        _schema_8_file(path)
    async with SqliteTaskStore.open(path):
        pass
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        raw.execute("DELETE FROM tasks")
        for task_state in TaskState:
            raw.execute(
                "INSERT INTO tasks (id, name, state, version, updated_at, created_us, body)"
                " VALUES (?, 'flow', ?, 1, 0, 0, '{}')",
                (f"t-{task_state.value}", task_state.value),
            )
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            raw.execute("UPDATE tasks SET state = 'done' WHERE id = 't-running'")
        with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
            raw.execute("UPDATE tasks SET state = NULL WHERE id = 't-running'")
        raw.execute("UPDATE tasks SET id = ? WHERE id = 't-running'", (TASK,))
        for state in NodeState:
            raw.execute(
                "INSERT INTO node_runs (task_id, node, state, attempt, updated_at)"
                " VALUES (?, ?, ?, 1, 0)",
                (TASK, f"n-{state.value}", state.value),
            )
        for outcome in [*AttemptOutcome, None]:
            name = outcome.value if outcome is not None else "none"
            raw.execute(
                "INSERT INTO node_attempts (task_id, node, attempt, worker, started_at, outcome)"
                " VALUES (?, ?, 1, 'w', 0, ?)",
                (TASK, f"n-{name}", outcome.value if outcome is not None else None),
            )
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            raw.execute(
                "INSERT INTO node_runs (task_id, node, state, attempt, updated_at)"
                " VALUES (?, 'x', 'finished', 1, 0)",
                (TASK,),
            )
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            raw.execute("UPDATE node_runs SET state = 'Running' WHERE node = 'n-running'")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            raw.execute("UPDATE node_attempts SET outcome = 'done' WHERE node = 'n-none'")


async def test_a_node_end_builds_no_temporary_index(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with SqliteTaskStore.open(path):
        pass
    with closing(sqlite3.connect(path)) as raw:
        for text in (nodes.END_ATTEMPT, nodes.END_CHECKPOINT):
            program = raw.execute("EXPLAIN " + text, [None] * text.count("?")).fetchall()
            assert [op for _, op, *_ in program if op == "OpenEphemeral"] == [], text
