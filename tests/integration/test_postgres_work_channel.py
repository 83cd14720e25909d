"""A process that only runs a worker hears, on PostgreSQL, only the changes a worker acts
on (``taskloom_work``); every other process still hears every change (ADR 0062).

The worker process (``pg_worker``) polls and beats every 600 s: what reaches it in these
tests came through its notifications."""

from collections.abc import Callable
from typing import Any

import anyio
import psycopg
import pytest
from anyio.abc import TaskStatus
from psycopg import sql

from taskloom.bootstrap import open_engine
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import TaskId
from taskloom.engine.runs import AttemptOutcome
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.persistence.postgres import PostgresSettings, PostgresTaskStore, notify
from taskloom.persistence.postgres import schema as schema_versions
from taskloom.persistence.postgres.driver import application_name
from tests import postgres
from tests.helpers import eventually
from tests.integration import pg_worker
from tests.integration.conftest import Heard
from tests.integration.pg_worker import server, worker_process


async def _heard_of(heard: Heard, manager: TaskManager, task_id: str, state: str) -> None:
    await eventually(lambda: _true((task_id, state) in heard[id(manager)]), within_s=15)


async def _true(value: bool) -> bool:
    return value


async def test_another_workers_claim_and_end_do_not_reach_a_worker_only_process(
    schema: str, heard: Heard
) -> None:
    async with (
        server(schema) as here,
        server(schema, worker_only=True) as worker_only,
        worker_process(schema),
    ):
        task = await submit(here.manager, pg_worker.double, {"n": 1})
        with anyio.fail_after(15):
            done = await here.manager.wait_until_terminal(task.id)
        assert done.result == 2
        # a change on the work channel after the run's end: once it is heard, all that the
        # run's changes sent on the channel the worker-only process listens to is heard too
        marker = await here.manager.create("nobody_runs_it", {})
        await here.manager.cancel(marker.id)
        await _heard_of(heard, worker_only.manager, marker.id, "cancelled")
        told = [state for task_id, state in heard[id(worker_only.manager)] if task_id == task.id]
        assert told == ["queued"]  # the creation: new work; not the other worker's claim, end
        everything = [state for task_id, state in heard[id(here.manager)] if task_id == task.id]
        assert "running" in everything
        assert "completed" in everything


async def test_a_follower_hears_every_state_a_worker_only_process_writes(
    schema: str, heard: Heard
) -> None:
    async with server(schema) as here, worker_process(schema):
        task = await submit(here.manager, pg_worker.double, {"n": 2})
        await _heard_of(heard, here.manager, task.id, "running")  # the worker's claim
        await _heard_of(heard, here.manager, task.id, "completed")  # and the run's end
        with anyio.fail_after(15):
            done = await here.manager.wait_until_terminal(task.id)
        assert done.result == 4


async def test_an_answer_that_wakes_one_node_of_a_parked_run_reaches_a_worker_only_process(
    schema: str,
) -> None:
    async with server(schema) as here, worker_process(schema):
        task = await submit(here.manager, pg_worker.two_questions, {"n": 0})

        async def both_asked_and_parked() -> bool:
            current = await here.manager.get(task.id)
            return current.parked and len(current.input_requests) == 2

        await eventually(both_asked_and_parked, within_s=15)
        asked = await here.manager.get(task.id)
        first = next(key for key in asked.input_requests if key.startswith("first"))
        second = next(key for key in asked.input_requests if key.startswith("second"))
        answered = await here.manager.provide_input(task.id, first, 1)
        assert answered.state is TaskState.INPUT_REQUIRED  # the second question still waits

        async def first_node_completed() -> bool:
            attempts = await here.runs.attempts(TaskId(task.id))
            return any(
                a.node == "first" and a.outcome is AttemptOutcome.COMPLETED for a in attempts
            )

        await eventually(first_node_completed, within_s=15)  # the run was claimed at once
        await eventually(both_asked_and_parked_again(here.manager, task.id), within_s=15)
        await here.manager.provide_input(task.id, second, 2)  # now the run is queued again
        with anyio.fail_after(15):
            done = await here.manager.wait_until_terminal(task.id)
        assert done.state is TaskState.COMPLETED
        assert done.result == {"first": 1, "second": 2}


def both_asked_and_parked_again(manager: TaskManager, task_id: str) -> Callable[[], Any]:
    async def parked() -> bool:
        current = await manager.get(task_id)
        return current.parked and current.wake_at is None

    return parked


async def test_a_worker_only_engine_listens_to_the_work_channel_again_after_losing_it(
    schema: str,
) -> None:
    worker_only = pg_worker.settings(postgres.TEST_URL, schema, run_worker=True, worker_only=True)
    async with server(schema) as here, open_engine(worker_only) as working:
        store = working.runs
        assert isinstance(store, PostgresTaskStore)
        assert await _listening(store, notify.WORK_CHANNEL, set())
        assert not await _listening(store, notify.CHANNEL, set())
        dead = await postgres.terminate_sessions(store)
        await eventually(lambda: _listening(store, notify.WORK_CHANNEL, dead), within_s=15)
        task = await submit(here.manager, pg_worker.double, {"n": 5})
        with anyio.fail_after(15):  # polls every 600 s: the notification woke it
            done = await here.manager.wait_until_terminal(task.id)
        assert done.result == 10


async def _listening(store: PostgresTaskStore, channel: str, dead: set[int]) -> bool:
    """Whether a live session of *store* (not one of *dead*) listens to *channel*."""
    async with await psycopg.AsyncConnection.connect(postgres.TEST_URL) as connection:
        cursor = await connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND query = %s",
            (application_name(store.origin), f"LISTEN {channel}"),
        )
        return any(pid not in dead for (pid,) in await cursor.fetchall())


async def test_the_migration_adds_the_work_channel_to_a_schema_of_the_previous_version(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = PostgresSettings(url=postgres.TEST_URL, schema_name=schema)
    everything = schema_versions.migrations()
    previous = everything[:-1]
    monkeypatch.setattr(schema_versions, "migrations", lambda: previous)
    async with PostgresTaskStore.open(settings):  # a taskloom of the previous version
        pass
    monkeypatch.setattr(schema_versions, "migrations", lambda: everything)
    assert await _version(schema) == len(previous)
    work: list[tuple[TaskId, str]] = []
    every: list[tuple[TaskId, str]] = []
    async with PostgresTaskStore.open(settings) as store, anyio.create_task_group() as group:
        assert await _version(schema) == len(everything)
        await group.start(_listen, store, notify.WORK_CHANNEL, work)
        await group.start(_listen, store, notify.CHANNEL, every)
        task = await TaskManager(store).create("job", {})
        await eventually(lambda: _true((task.id, "queued") in work), within_s=10)
        await eventually(lambda: _true((task.id, "queued") in every), within_s=10)
        group.cancel_scope.cancel()


async def _listen(
    store: PostgresTaskStore,
    channel: str,
    found: list[tuple[TaskId, str]],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Record what *channel* announces of any process's changes to *store*'s schema."""

    async def on_change(task_id: TaskId, state: str) -> None:
        found.append((task_id, state))

    await notify.listen(
        store.settings,
        store.name,
        "a-test-listener",
        on_change,
        channel=channel,
        task_status=task_status,
    )


async def _version(name: str) -> int:
    async with await psycopg.AsyncConnection.connect(postgres.TEST_URL) as connection:
        cursor = await connection.execute(
            sql.SQL("SELECT max(version) FROM {}").format(
                sql.Identifier(name, schema_versions.VERSION_TABLE)
            )
        )
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])
