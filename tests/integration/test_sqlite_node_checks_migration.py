"""ADR 0054: schema 9 writes the node tables' CHECK constraints as comparisons. Migrating
a schema-8 file keeps every node row; the constraints refuse what they refused; and a
node's end no longer builds a temporary index of the allowed values for each row."""

import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest

from taskloom.engine.models import Task, TaskId
from taskloom.engine.runs import AttemptOutcome, NodeState
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import SqliteTaskStore, nodes, rows, schema

BEFORE_CHECKS = 8
TASK = "a" * 22


def _schema_8_file(path: Path) -> None:
    moment = datetime(2026, 1, 2, tzinfo=UTC)
    task = Task(
        id=TaskId(TASK),
        name="flow",
        arguments={},
        owner=None,
        state=TaskState.RUNNING,
        created_at=moment,
        updated_at=moment,
        ttl_ms=None,
        version=2,
    )
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        for _, sql in schema.migrations()[:BEFORE_CHECKS]:
            raw.executescript(sql)
        raw.execute(f"PRAGMA user_version = {BEFORE_CHECKS:d}")
        raw.execute(f"PRAGMA application_id = {schema.APPLICATION_ID:d}")
        raw.execute(rows.INSERT_SQL, rows.insert_row(task))
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


def _node_rows(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with closing(sqlite3.connect(path)) as raw:
        runs = raw.execute("SELECT * FROM node_runs ORDER BY node").fetchall()
        attempts = raw.execute("SELECT * FROM node_attempts ORDER BY node, attempt").fetchall()
    return runs, attempts


async def test_migrating_to_schema_9_keeps_every_node_row(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _schema_8_file(path)
    before = _node_rows(path)
    async with SqliteTaskStore.open(path):
        pass
    assert _node_rows(path) == before
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == schema.latest_version()
        assert raw.execute("PRAGMA foreign_key_check").fetchall() == []


async def test_node_rows_of_a_task_gone_are_not_copied(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _schema_8_file(path)
    kept = _node_rows(path)
    _orphans(path)
    async with SqliteTaskStore.open(path):
        pass
    assert _node_rows(path) == kept


async def test_the_rebuilt_checks_refuse_what_they_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with SqliteTaskStore.open(path):
        pass
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        raw.execute(
            "INSERT INTO tasks (id, name, state, version, updated_at, created_us, body)"
            " VALUES (?, 'flow', 'running', 1, 0, 0, '{}')",
            (TASK,),
        )
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
