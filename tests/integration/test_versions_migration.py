"""ADR 0039: migrating a schema-7 SQLite file to 8 copies each stored task's workflow
version into its column, so the claims that filter on it find the old runs."""

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import Task, TaskId
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import SqliteTaskStore, rows, schema
from taskloom.testing import FakeClock

BEFORE_VERSIONS = 7


def _schema_7_file(path: Path, *tasks: Task) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        for _, sql in schema.migrations()[:BEFORE_VERSIONS]:
            raw.executescript(sql)
        raw.execute(f"PRAGMA user_version = {BEFORE_VERSIONS:d}")
        raw.execute(f"PRAGMA application_id = {schema.APPLICATION_ID:d}")
        for task in tasks:
            row = rows.insert_row(task)
            raw.execute(
                "INSERT INTO tasks (id, name, owner, state, version, updated_at, expires_at,"
                " idempotency_key, parent_id, created_us, body)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*row[:10], row[11]),
            )


def _queued(letter: str, version: str) -> Task:
    moment = datetime(2026, 1, 2, tzinfo=UTC)
    return Task(
        id=TaskId(letter * 22),
        name="vflow",
        arguments={},
        owner=None,
        state=TaskState.QUEUED,
        created_at=moment,
        updated_at=moment,
        ttl_ms=None,
        workflow_version=version,
        version=1,
    )


async def test_runs_stored_before_schema_8_are_claimed_by_their_version(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _schema_7_file(path, _queued("a", "1"), _queued("b", "2"))
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store, runs=store, clock=FakeClock())
        now = manager.clock.now()
        claimed = await store.claim_runs(
            worker="w",
            workflows=frozenset({("vflow", "2")}),
            now=now,
            lease_for=timedelta(seconds=30),
            limit=10,
            start=claim_start(now),
        )
        assert [run.task.id for run in claimed] == ["b" * 22]
        found = await store.unfinished_versions(now)
        assert [(each.version, each.unfinished) for each in found] == [("1", 1), ("2", 1)]
