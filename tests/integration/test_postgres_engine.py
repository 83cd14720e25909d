"""Engines of several processes (here: several pools in one process) on one PostgreSQL."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import psycopg
import pytest
from pydantic import BaseModel

from taskloom.bootstrap import Engine, open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import PersistenceError
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.runs import AttemptOutcome
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.factory import database_settings, open_store
from taskloom.persistence.postgres import PostgresSettings, PostgresTaskStore
from taskloom.persistence.postgres.driver import application_name
from taskloom.persistence.postgres.notify import foreign_change
from taskloom.persistence.sqlite import SqliteSettings, SqliteTaskStore
from tests import postgres
from tests.helpers import eventually


class Numbers(BaseModel):
    n: int


double = Workflow("double", version="1", input=Numbers)


@double.node()
async def twice(ctx: NodeContext[Numbers]) -> int:
    return ctx.input.n * 2


POLL_NEVER = 600.0
"""Poll and heartbeat periods longer than any wait below: what arrives, NOTIFY brought."""


def _settings(database: PostgresSettings, *, run_worker: bool) -> TaskloomSettings:
    return TaskloomSettings(
        database=database,
        workflow_modules=(),
        load_entry_points=False,
        run_worker=run_worker,
        run_sweeper=False,
        worker=WorkerSettings(poll_s=POLL_NEVER, lease_s=3 * POLL_NEVER),
    )


@asynccontextmanager
async def server_and_worker(
    database: PostgresSettings, *workflows: Workflow[Any]
) -> AsyncIterator[tuple[Engine, Engine]]:
    """Two engines on one database, as two processes would be: one serves, one works."""
    registry = WorkflowRegistry({workflow.name: workflow for workflow in workflows})
    async with (
        open_engine(_settings(database, run_worker=False), workflows=registry) as server,
        open_engine(_settings(database, run_worker=True), workflows=registry) as worker,
    ):
        yield server, worker


async def test_a_worker_wakes_on_work_submitted_elsewhere_and_the_server_sees_it_end(
    database: PostgresSettings,
) -> None:
    async with server_and_worker(database, double) as (server, worker):
        assert server.worker is None
        assert worker.worker is not None
        task = await submit(server.manager, double, {"n": 21})
        with anyio.fail_after(10):
            done = await server.manager.wait_until_terminal(task.id)  # no re-reading
        assert done.result == 42
        assert await worker.manager.get(task.id) == done
        (attempt,) = await server.runs.attempts(task.id)
        assert attempt.worker == worker.worker.worker_id


async def test_a_cancel_made_by_another_process_reaches_the_running_node(
    database: PostgresSettings,
) -> None:
    flow = Workflow("block", version="1", input=Numbers)
    started = anyio.Event()
    cancelled = anyio.Event()

    @flow.node()
    async def wait_forever(ctx: NodeContext[Numbers]) -> int:
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return 0

    async with server_and_worker(database, flow) as (server, worker):
        task = await submit(server.manager, flow, {"n": 1})
        with anyio.fail_after(10):
            await started.wait()
            await server.manager.cancel(task.id, reason="stop")
            await cancelled.wait()

        async def recorded() -> bool:
            attempts = await worker.runs.attempts(task.id)
            return [a.outcome for a in attempts] == [AttemptOutcome.CANCELLED]

        await eventually(recorded)
        assert (await worker.manager.get(task.id)).state is TaskState.CANCELLED


async def _listening_again(store: PostgresTaskStore, dead: set[int]) -> bool:
    async with await psycopg.AsyncConnection.connect(postgres.TEST_URL) as connection:
        cursor = await connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
            " AND query = 'LISTEN taskloom_changes'",
            (application_name(store.origin),),
        )
        return any(pid not in dead for (pid,) in await cursor.fetchall())


async def test_engines_carry_on_after_losing_every_connection(database: PostgresSettings) -> None:
    async with server_and_worker(database, double) as (server, worker):
        stores = [engine.runs for engine in (server, worker)]
        assert all(isinstance(store, PostgresTaskStore) for store in stores)
        for store in cast(list[PostgresTaskStore], stores):
            dead = await postgres.terminate_sessions(store)
            assert len(dead) >= 2  # its pool's connection and its listening one

            async def listening(store: PostgresTaskStore = store, dead: set[int] = dead) -> bool:
                return await _listening_again(store, dead)

            await eventually(listening)
        task = await submit(server.manager, double, {"n": 2})  # retried on a new connection
        with anyio.fail_after(10):
            done = await server.manager.wait_until_terminal(task.id)
        assert done.result == 4


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ("s1 other abc running", "abc"),
        ("s1  abc queued", "abc"),  # written by a client that is no taskloom store
        ("s1 mine abc running", None),  # our own change: already published in-process
        ("s2 other abc running", None),  # another schema: another taskloom installation
        ("garbage", None),
    ],
)
def test_only_other_processes_changes_of_our_schema_are_relayed(
    payload: str, expected: str | None
) -> None:
    assert foreign_change(payload, schema="s1", origin="mine") == expected


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


def test_settings_read_from_data_pick_the_store_by_its_fields() -> None:
    url = "postgresql://me@db.example/tasks"
    on_postgres = TaskloomSettings.model_validate({"database": {"url": url}})
    on_sqlite = TaskloomSettings.model_validate({"database": {"path": "t.db"}})
    assert on_postgres.database == PostgresSettings(url=url)
    assert on_sqlite.database == SqliteSettings(path=Path("t.db"))


async def test_open_store_opens_the_store_it_is_given(
    tmp_path: Path, database: PostgresSettings
) -> None:
    async with open_store(tmp_path / "t.db") as sqlite_store:
        assert isinstance(sqlite_store, SqliteTaskStore)
    async with open_store(database) as postgres_store:
        assert isinstance(postgres_store, PostgresTaskStore)
