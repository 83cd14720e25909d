"""Engines of several processes (here: several pools in one process) on one PostgreSQL."""

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from pydantic import BaseModel

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import PersistenceError
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.submit import submit
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.factory import database_settings, open_store
from taskloom.persistence.postgres import PostgresSettings, PostgresTaskStore
from taskloom.persistence.sqlite import SqliteSettings, SqliteTaskStore
from tests import postgres


class Numbers(BaseModel):
    n: int


double = Workflow("double", version="1", input=Numbers)


@double.node()
async def twice(ctx: NodeContext[Numbers]) -> int:
    return ctx.input.n * 2


@pytest.fixture
async def database() -> AsyncIterator[PostgresSettings]:
    postgres.require_server()
    name = postgres.new_schema_name()
    yield PostgresSettings(url=postgres.TEST_URL, schema_name=name)
    await postgres.drop_schema(name)


def _settings(database: PostgresSettings, *, run_worker: bool) -> TaskloomSettings:
    return TaskloomSettings(
        database=database,
        workflow_modules=(),
        load_entry_points=False,
        run_worker=run_worker,
        run_sweeper=False,
        worker=WorkerSettings(poll_s=0.05),
    )


async def test_a_server_and_a_worker_share_one_database(database: PostgresSettings) -> None:
    registry = WorkflowRegistry({"double": double})
    async with (
        open_engine(_settings(database, run_worker=False), workflows=registry) as server,
        open_engine(_settings(database, run_worker=True), workflows=registry) as worker,
    ):
        assert server.worker is None
        assert worker.worker is not None
        task = await submit(server.manager, double, {"n": 21})
        with anyio.fail_after(10):
            done = await server.manager.wait_until_terminal(task.id, recheck_every=0.05)
        assert done.result == 42
        assert await worker.manager.get(task.id) == done
        (attempt,) = await server.runs.attempts(task.id)
        assert attempt.worker == worker.worker.worker_id


def test_a_url_selects_postgresql_and_a_path_selects_sqlite(tmp_path: Path) -> None:
    url = "postgresql://me@db.example:5432/tasks"
    assert database_settings(url) == PostgresSettings(url=url)
    assert database_settings("postgres://me@db/tasks") == PostgresSettings(
        url="postgres://me@db/tasks"
    )
    assert database_settings(tmp_path / "t.db") == SqliteSettings(path=tmp_path / "t.db")
    assert database_settings("t.db") == SqliteSettings(path=Path("t.db"))
    with pytest.raises(PersistenceError, match="unsupported database URL scheme 'mysql'"):
        database_settings("mysql://me@db/tasks")


async def test_open_store_opens_the_store_it_is_given(
    tmp_path: Path, database: PostgresSettings
) -> None:
    async with open_store(tmp_path / "t.db") as sqlite_store:
        assert isinstance(sqlite_store, SqliteTaskStore)
    async with open_store(database) as postgres_store:
        assert isinstance(postgres_store, PostgresTaskStore)
