"""Claims on PostgreSQL skip the runs another claim holds instead of coming back empty.

Two workers that claim at once rank the same runs first. A claim that locked only its
first *limit* candidates then found them all held (``SKIP LOCKED``) or taken since its
snapshot, returned nothing while work waited, and its worker slept until its next poll:
with 2 and 4 worker processes, about 10 empty claims each per 300 runs, and no scale-out
(``bench/pg_scaleout.py``). A claim now goes past the candidates held by others.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel

from taskloom.bootstrap import Engine, open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import Task
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.waits import Wait
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.persistence.postgres import PostgresSettings, PostgresTaskStore
from taskloom.testing import FakeClock
from tests import postgres
from tests.helpers import eventually


class Empty(BaseModel):
    """No input."""


@pytest.fixture
async def store() -> AsyncIterator[PostgresTaskStore]:
    async with postgres.fresh_store() as opened:
        yield opened


async def test_a_claim_takes_the_next_run_when_another_claim_holds_the_first(
    store: PostgresTaskStore,
) -> None:
    clock = FakeClock()
    manager = TaskManager(store, clock=clock)
    first = await manager.create("job")
    second = await manager.create("job")
    tasks = sql.Identifier(store.settings.schema_name, "tasks")
    async with await psycopg.AsyncConnection.connect(postgres.TEST_URL) as other:
        # another worker's claim, in flight: it holds the oldest run's row
        await other.execute(
            sql.SQL("SELECT id FROM {} WHERE id = %s FOR NO KEY UPDATE").format(tasks),
            (first.id,),
        )
        claimed = await store.claim_runs(
            worker="w",
            workflows=frozenset({"job"}),
            now=clock.now(),
            lease_for=timedelta(seconds=30),
            limit=1,
            start=claim_start(clock.now()),
        )
        await other.rollback()
    assert [run.task.id for run in claimed] == [second.id]
    assert (await manager.get(first.id)).state is TaskState.QUEUED


async def test_a_worker_reads_only_the_changes_of_others_that_concern_it(
    store: PostgresTaskStore,
) -> None:
    """Every task change is announced to every process: a worker reads new and parked
    runs and those it executes, never the claims and ends of other workers' runs."""
    worker = Worker(TaskManager(store, clock=FakeClock()), {})
    task = await worker.manager.create("job")
    assert worker._wants(task.id, TaskState.QUEUED)
    assert worker._wants(task.id, TaskState.INPUT_REQUIRED)
    assert not worker._wants(task.id, TaskState.RUNNING)
    assert not worker._wants(task.id, TaskState.COMPLETED)


async def test_a_full_worker_does_not_read_new_runs_but_claims_when_a_slot_frees() -> None:
    """A worker with every slot taken ignores another process's new run (no read) and
    claims it once a slot frees up, without waiting for its next poll."""
    flow = Workflow("hold", version="1", input=Empty)
    release = anyio.Event()

    @flow.node()
    async def wait_for_release(ctx: NodeContext[Empty]) -> int:
        await release.wait()
        return 1

    async with _two_processes(flow) as (server, working):
        worker = working.worker
        assert worker is not None
        with anyio.fail_after(30):
            await eventually(lambda: _idle(worker))  # its first claim found nothing
            first = await submit(working.manager, flow, {})
            assert first.state is TaskState.RUNNING  # started eagerly: no claim
            read: list[str] = []
            get = working.manager.get

            async def counting_get(task_id: str, **kwargs: Any) -> Task:
                read.append(task_id)
                return await get(task_id, **kwargs)

            working.manager.get = counting_get  # type: ignore[method-assign]
            second = await submit(server.manager, flow, {})
            await eventually(lambda: _told(worker))  # its NOTIFY, not read
            assert second.id not in read
            release.set()
            done = await server.manager.wait_until_terminal(second.id)
        assert done.state is TaskState.COMPLETED
        assert (await server.manager.get(first.id)).state is TaskState.COMPLETED


async def test_a_run_parked_elsewhere_on_a_short_timer_while_the_worker_is_full_is_claimed_when_due() -> (
    None
):
    """Another process parks a run on a timer shorter than the poll period while this
    worker has every slot taken; a slot frees up before the timer is due. The worker must
    still claim the run once it is due (it did when it read every queued change: its
    timer was scheduled, ``Worker._wake_at``), not at its next poll."""
    flow = Workflow("hold-nap", version="1", input=Empty)
    release = anyio.Event()

    @flow.node()
    async def wait_for_release(ctx: NodeContext[Empty]) -> int:
        if ctx.task_id == held_id:
            await release.wait()
        return 1

    held_id = ""
    async with _two_processes(flow) as (server, working):
        worker = working.worker
        assert worker is not None
        with anyio.fail_after(15):  # the timer is due in 2 s; the next poll in 600 s
            await eventually(lambda: _idle(worker))
            held = await submit(working.manager, flow, {})
            held_id = held.id
            assert held.state is TaskState.RUNNING  # started eagerly: the worker is full
            napping = await submit(server.manager, flow, {})
            # another process's worker runs it and its node sleeps 2 s: it parks
            manager = server.manager
            (run,) = await manager.claim(
                worker="elsewhere",
                workflows=frozenset({(flow.name, flow.version)}),
                lease_for=timedelta(seconds=NEVER),
                limit=1,
            )
            due = manager.clock.now() + timedelta(seconds=2)

            def sleeps(task: Task) -> Task:
                changes: dict[str, Any] = {"timers": {"nap": due}, "version": task.version + 1}
                return task.model_copy(update={**changes, "updated_at": manager.clock.now()})

            store = server.runs
            assert isinstance(store, PostgresTaskStore)
            await store.update(napping.id, manager.clock.now(), sleeps, run.lease)
            await manager.park(napping.id, [Wait("timer", "nap")], lease=run.lease)
            await eventually(lambda: _told(worker))
            release.set()  # a slot frees up before the timer is due
            done = await server.manager.wait_until_terminal(napping.id)
        assert done.state is TaskState.COMPLETED


NEVER = 600.0
"""No poll and no heartbeat in the two-process tests: what the worker learns, NOTIFY brought."""


@asynccontextmanager
async def _two_processes(flow: Workflow[Any]) -> AsyncIterator[tuple[Engine, Engine]]:
    """Two engines on a new schema, as two processes would be: one without a worker
    (``server``), one with a worker of one slot that never polls (``working``)."""
    postgres.require_server()
    name = postgres.new_schema_name()
    database = PostgresSettings(url=postgres.TEST_URL, schema_name=name)
    registry = WorkflowRegistry({flow.name: flow})

    def settings(*, run_worker: bool) -> TaskloomSettings:
        return TaskloomSettings(
            database=database,
            workflow_modules=(),
            load_entry_points=False,
            run_worker=run_worker,
            run_sweeper=False,
            worker=WorkerSettings(max_runs=1, poll_s=NEVER, lease_s=3 * NEVER),
        )

    try:
        async with (
            open_engine(settings(run_worker=False), workflows=registry) as server,
            open_engine(settings(run_worker=True), workflows=registry) as working,
        ):
            yield server, working
    finally:
        await postgres.drop_schema(name)


async def _told(worker: Worker) -> bool:
    """The full worker heard that work waits (it will claim when a slot frees up)."""
    return worker._saturated


async def _idle(worker: Worker) -> bool:
    return worker._idle
