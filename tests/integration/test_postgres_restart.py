"""A PostgreSQL restart in the middle of a run: the run finishes after the database
returns, from where it was, with every node run once.

The test owns the server (``tests.private_postgres``: a throwaway cluster on a free port),
stops it while a node body is running, lets the body return while the server is down
(so the node's checkpoint, the heartbeats and the LISTEN connection all meet the outage),
then starts it again. The last test keeps it down for longer than the store's retries."""

import contextlib
import logging
import time
from collections.abc import Iterator
from datetime import timedelta

import anyio
import psycopg
import pytest
from anyio.abc import TaskStatus
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import DatabaseUnavailableError
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import Task
from taskloom.engine.runs import AttemptOutcome
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.persistence.postgres import PostgresSettings, PostgresTaskStore
from tests.helpers import eventually
from tests.private_postgres import PrivateCluster, private_cluster

pytestmark = pytest.mark.slow


class Number(BaseModel):
    n: int


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    with private_cluster() as started:
        yield started


async def test_a_run_finishes_after_the_database_restarts_under_it(
    cluster: PrivateCluster,
) -> None:
    running = anyio.Event()
    gate = anyio.Event()
    returned = anyio.Event()
    flow = Workflow("restart", version="1", input=Number)

    @flow.node()
    async def before(ctx: NodeContext[Number]) -> int:
        return ctx.input.n + 1

    @flow.node(deps=[before])
    async def across(ctx: NodeContext[Number]) -> int:
        running.set()
        await gate.wait()
        returned.set()
        return ctx.output(before) * 2

    @flow.node(deps=[across])
    async def after(ctx: NodeContext[Number]) -> int:
        return ctx.output(across) + 1

    settings = PostgresSettings(url=cluster.url, retry_s=60)
    # a lease the outage cannot outlast: with a short one, a slow stop of the server (at
    # load) let the worker stop the run for its unrenewed lease, as it must (ADR 0038),
    # before the body could return (that case: tests/contract/test_one_body_at_a_time.py)
    worker_settings = WorkerSettings(poll_s=0.2, lease_s=60, progress_interval_s=0)
    with anyio.fail_after(90):
        async with PostgresTaskStore.open(settings) as store:
            manager = TaskManager(store)
            worker = Worker(manager, {flow.name: flow}, settings=worker_settings)
            async with anyio.create_task_group() as task_group:
                await task_group.start(worker.run)
                task = await submit(manager, flow, {"n": 20})
                await running.wait()

                await anyio.to_thread.run_sync(cluster.stop)
                with pytest.raises(psycopg.OperationalError):
                    await psycopg.AsyncConnection.connect(cluster.url, connect_timeout=2)
                gate.set()
                await returned.wait()  # its checkpoint is being written, and cannot be
                await anyio.to_thread.run_sync(cluster.start)

                done = await manager.wait_until_terminal(task.id, recheck_every=0.5)
                task_group.cancel_scope.cancel()
            attempts = await store.attempts(task.id)
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == 43
    assert [(a.node, a.attempt, a.outcome) for a in attempts] == [
        ("before", 1, AttemptOutcome.COMPLETED),
        ("across", 1, AttemptOutcome.COMPLETED),
        ("after", 1, AttemptOutcome.COMPLETED),
    ]


async def test_a_dead_workers_run_is_reclaimed_across_a_restart(cluster: PrivateCluster) -> None:
    """Recovery itself meets the outage: a run whose worker died is still leased when the
    server goes down; a live worker starts while it is down and takes the run over once it
    is back."""
    flow = Workflow("reclaimed", version="1", input=Number)

    @flow.node()
    async def only(ctx: NodeContext[Number]) -> int:
        return ctx.input.n * 3

    settings = PostgresSettings(url=cluster.url, retry_s=60)
    with anyio.fail_after(90):
        async with PostgresTaskStore.open(settings) as store:
            manager = TaskManager(store)
            task = await submit(manager, flow, {"n": 5})
            claimed = await store.claim_runs(
                worker="dead",
                workflows=frozenset({flow.name}),
                now=manager.clock.now(),
                lease_for=timedelta(seconds=1),
                limit=1,
                start=claim_start(manager.clock.now(), "started"),
            )
            assert len(claimed) == 1  # and its worker never heard of again
            await anyio.to_thread.run_sync(cluster.stop)
            worker = Worker(
                manager,
                {flow.name: flow},
                settings=WorkerSettings(poll_s=0.2, lease_s=3, progress_interval_s=0),
            )
            async with anyio.create_task_group() as task_group:
                await task_group.start(_run_from_outage, worker)
                await anyio.to_thread.run_sync(cluster.start)
                done = await manager.wait_until_terminal(task.id, recheck_every=0.5)
                task_group.cancel_scope.cancel()
            attempts = await store.attempts(task.id)
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == 15
    assert [(a.attempt, a.outcome, a.worker) for a in attempts] == [
        (1, AttemptOutcome.COMPLETED, worker.worker_id)
    ]


async def _run_from_outage(worker: Worker, *, task_status: TaskStatus[None]) -> None:
    """Start *worker* while the server is down (its first claim retries until it returns)."""
    task_status.started()
    await worker.run()


async def test_a_worker_waits_out_an_outage_longer_than_retry_s(
    cluster: PrivateCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The database stays down for several times ``retry_s``: the node's checkpoint, the
    heartbeats and the claims all give up their retries. The worker logs each failure,
    stays up, and once the database is back resumes the run (the node whose end was lost
    runs again) and finishes it."""
    caplog.set_level(logging.DEBUG, logger="taskloom.engine.worker")
    running = anyio.Event()
    gate = anyio.Event()
    flow = Workflow("outage", version="1", input=Number)

    @flow.node()
    async def before(ctx: NodeContext[Number]) -> int:
        return ctx.input.n + 1

    @flow.node(deps=[before])
    async def across(ctx: NodeContext[Number]) -> int:
        running.set()
        await gate.wait()
        return ctx.output(before) * 2

    @flow.node(deps=[across])
    async def after(ctx: NodeContext[Number]) -> int:
        return ctx.output(across) + 1

    retry_s = 0.5
    settings = PostgresSettings(
        url=cluster.url, retry_s=retry_s, acquire_timeout_s=0.5, connect_timeout_s=1
    )
    worker_settings = WorkerSettings(poll_s=0.2, lease_s=3, progress_interval_s=0)

    async def dropped_and_beats_failed() -> bool:
        failed = sum("heartbeat failed" in record.getMessage() for record in caplog.records)
        return worker.active_runs == 0 and failed >= 2

    with anyio.fail_after(120):
        async with PostgresTaskStore.open(settings) as store:
            manager = TaskManager(store)
            worker = Worker(manager, {flow.name: flow}, settings=worker_settings)
            async with anyio.create_task_group() as task_group:
                await task_group.start(worker.run)
                task = await submit(manager, flow, {"n": 20})
                await running.wait()

                await anyio.to_thread.run_sync(cluster.stop)
                stopped = time.monotonic()
                gate.set()  # the node returns; its checkpoint gives up after retry_s
                await eventually(dropped_and_beats_failed, within_s=60, every_s=0.05)
                down_s = time.monotonic() - stopped
                await anyio.to_thread.run_sync(cluster.start)

                ended: list[Task] = []

                async def run_ended() -> bool:  # the pool reconnects with a backoff of its own
                    with contextlib.suppress(DatabaseUnavailableError):
                        ended[:] = [await manager.get(task.id)]
                    return bool(ended) and ended[0].is_terminal

                await eventually(run_ended, within_s=60, every_s=0.2)
                done = ended[0]
                task_group.cancel_scope.cancel()
            attempts = await store.attempts(task.id)
    assert down_s > 3 * retry_s
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == 43
    assert [(a.node, a.attempt, a.outcome) for a in attempts] == [
        ("before", 1, AttemptOutcome.COMPLETED),
        ("across", 1, AttemptOutcome.INTERRUPTED),
        ("across", 2, AttemptOutcome.COMPLETED),
        ("after", 1, AttemptOutcome.COMPLETED),
    ]
    assert {a.worker for a in attempts} == {worker.worker_id}
    logged = [record.getMessage() for record in caplog.records]
    assert any(f"dropped run {task.id}" in line for line in logged), logged
