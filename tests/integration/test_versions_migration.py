"""ADR 0039: migrating a schema-7 SQLite file to 8 copies each stored task's workflow
version into its column, so the claims that filter on it find the old runs."""

from datetime import timedelta
from pathlib import Path

from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import Task
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.testing import FakeClock
from tests.sqlite_files import file_at, insert_task, stored_task

BEFORE_VERSIONS = 7


def _schema_7_file(path: Path, *tasks: Task) -> None:
    with file_at(path, BEFORE_VERSIONS) as raw:
        for task in tasks:
            insert_task(raw, BEFORE_VERSIONS, task)


def _queued(letter: str, version: str) -> Task:
    return stored_task(letter * 22, name="vflow", workflow_version=version)


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
