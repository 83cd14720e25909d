"""ADR 0067: schema 11 replaces the index ``tasks_owner_state`` (owner, state) with
``tasks_state_owner_seq`` (state, owner, seq), which a claim names (``INDEXED BY``).
Migrating a schema-10 file keeps every row, swaps the index and passes SQLite's
integrity check; a claim then reads the new index, and the capped counts by owner and
state (the quota's, the dashboard's) still read an index."""

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from taskloom.engine.manager import claim_start
from taskloom.persistence.sqlite import SqliteTaskStore, schema
from tests.sqlite_files import file_at, insert_task, stored_task

BEFORE = 10
TASK = "c" * 22


def _indexes(raw: sqlite3.Connection) -> set[str]:
    found = raw.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")
    return {name for (name,) in found}


async def test_migrating_to_schema_11_swaps_the_index_and_keeps_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with file_at(path, BEFORE) as raw:
        insert_task(raw, BEFORE, stored_task(TASK))
        assert "tasks_owner_state" in _indexes(raw)
        assert "tasks_state_owner_seq" not in _indexes(raw)
    async with SqliteTaskStore.open(path) as store:
        now = datetime.now(UTC)
        (claimed,) = await store.claim_runs(
            worker="w",
            workflows=frozenset({"flow"}),
            now=now,
            lease_for=timedelta(seconds=10),
            limit=1,
            start=claim_start(now),
        )
        assert claimed.task.id == TASK
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == schema.latest_version()
        indexes = _indexes(raw)
        assert "tasks_state_owner_seq" in indexes
        assert "tasks_owner_state" not in indexes
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert raw.execute("SELECT id, state FROM tasks").fetchall() == [(TASK, "running")]


async def test_a_capped_count_by_owner_and_state_reads_the_index(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with SqliteTaskStore.open(path):
        pass
    query = "SELECT count(*) FROM (SELECT 1 FROM tasks WHERE state = ? AND owner = ? LIMIT 5)"
    with closing(sqlite3.connect(path)) as raw:
        plan = raw.execute("EXPLAIN QUERY PLAN " + query, ("queued", "ann")).fetchall()
    assert any("INDEX tasks_state_owner_seq" in detail for *_, detail in plan), plan
