"""ADR 0056: schema 10 drops the partial index ``tasks_active``, which no query of the
SQLite store could use (its condition's IN list is not the queries' term) and which cost
every task write two temporary b-trees. Migrating a schema-9 file keeps every row; a
task's insert and update build no temporary index; the claim still reads an index."""

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from taskloom.engine.claims import ClaimRule
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import TaskId
from taskloom.engine.states import TaskState
from taskloom.persistence.claims import SQLITE, claimable
from taskloom.persistence.sqlite import SqliteTaskStore, rows, schema
from tests.sqlite_files import file_at, insert_task, stored_task

BEFORE = 9
TASK = "b" * 22


def _schema_9_file(path: Path) -> None:
    task = stored_task(TASK)
    with file_at(path, BEFORE) as raw:
        insert_task(raw, BEFORE, task)
        assert _indexes(raw) >= {"tasks_active", "tasks_state_seq"}


def _indexes(raw: sqlite3.Connection) -> set[str]:
    found = raw.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")
    return {name for (name,) in found}


def _ephemeral(raw: sqlite3.Connection, text: str, parameters: object = ()) -> int:
    program = raw.execute("EXPLAIN " + text, parameters).fetchall()  # type: ignore[arg-type]
    return sum(1 for _, op, *_ in program if op == "OpenEphemeral")


async def test_migrating_to_schema_10_drops_the_index_and_keeps_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _schema_9_file(path)
    with closing(sqlite3.connect(path)) as raw:
        update = "UPDATE tasks SET state = 'running', version = 2 WHERE id = ?"
        assert _ephemeral(raw, update, (TASK,)) == 2  # the index's IN list, old row and new
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store, runs=store)
        assert (await manager.get(TaskId(TASK))).state is TaskState.QUEUED
        (claimed,) = await store.claim_runs(
            worker="w",
            workflows=frozenset({"flow"}),
            now=datetime.now(UTC),
            lease_for=timedelta(seconds=10),
            limit=1,
            start=claim_start(datetime.now(UTC)),
        )
        assert claimed.task.id == TASK
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == schema.latest_version()
        assert "tasks_active" not in _indexes(raw)
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert raw.execute("SELECT state FROM tasks").fetchall() == [("running",)]


async def test_a_task_write_builds_no_temporary_index(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with SqliteTaskStore.open(path):
        pass
    with closing(sqlite3.connect(path)) as raw:
        insert = rows.INSERT_SQL
        assert _ephemeral(raw, insert, [None] * insert.count("?")) == 0
        update = "UPDATE tasks SET state = 'completed', version = 3 WHERE id = ?"
        assert _ephemeral(raw, update, (TASK,)) == 0


async def test_the_claim_still_reads_an_index(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with SqliteTaskStore.open(path):
        pass
    condition, parameters = claimable(ClaimRule.of(frozenset({"flow"}), None), SQLITE)
    query = f"SELECT t.seq FROM tasks t LEFT JOIN leases l ON l.task_id = t.id WHERE {condition}"
    with closing(sqlite3.connect(path)) as raw:
        plan = raw.execute("EXPLAIN QUERY PLAN " + query, {**parameters, "now": 0}).fetchall()
    assert any("USING INDEX tasks_state_seq" in detail for *_, detail in plan), plan
