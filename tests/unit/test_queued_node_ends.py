"""A node's end on SQLite is committed once ``end_node`` is called, whether or not its
caller still waits (ADR 0056): the runner awaits such an end without a shielded scope,
so a worker stopped while an end is in flight leaves that end written all the same."""

import threading
from datetime import datetime, timedelta
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.runs import (
    AttemptOutcome,
    Lease,
    NodeEnd,
    NodeRun,
    NodeStart,
    NodeState,
    ends_queued,
)
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker
from taskloom.persistence.memory import InMemoryTaskStore
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.testing import FakeClock
from tests.contract.harness import FAST, finish


class Empty(BaseModel):
    pass


async def test_an_end_whose_caller_is_cancelled_is_committed(tmp_path: Path) -> None:
    clock = FakeClock()
    async with SqliteTaskStore.open(tmp_path / "ends.db") as store:
        manager = TaskManager(store, runs=store, clock=clock)
        task = await manager.create("job")
        (claimed,) = await store.claim_runs(
            worker="w",
            workflows=frozenset({"job"}),
            now=clock.now(),
            lease_for=timedelta(seconds=10),
            limit=1,
            start=claim_start(clock.now()),
        )
        lease = claimed.lease
        await store.start_node(lease, NodeStart(node="a", attempt=1), clock.now())
        end = NodeEnd(
            node="a",
            attempt=1,
            outcome=AttemptOutcome.COMPLETED,
            state=NodeState.COMPLETED,
            output=7,
        )
        with anyio.fail_after(10):
            with anyio.CancelScope() as scope:
                scope.cancel()  # delivered at the first wait: the end is queued by then
                await store.end_node(lease, end, clock.now())
            assert scope.cancelled_caught  # the caller never saw the commit
            await store.writer.submit(lambda raw: None)  # committed after the end
        checkpoints = await store.checkpoints(task.id)
        attempts = await store.attempts(task.id)
    assert checkpoints["a"].state is NodeState.COMPLETED
    assert checkpoints["a"].output == 7
    assert [attempt.outcome for attempt in attempts] == [AttemptOutcome.COMPLETED]


def test_only_the_store_that_queues_its_ends_says_so() -> None:
    assert ends_queued(SqliteTaskStore) is True
    assert ends_queued(InMemoryTaskStore()) is False  # its ends are shielded by the runner


class _YieldsFirst(SqliteTaskStore):
    """A subclass whose end yields before it is queued: a cancel there would lose it, so
    it says its ends are not queued (ADR 0056). The assignment type-checks (mypy runs
    over the tests): the attribute is a ``ClassVar``, not ``Final``."""

    node_ends_queued = False

    async def end_node(self, lease: Lease, end: NodeEnd, now: datetime) -> NodeRun:
        await anyio.lowlevel.checkpoint()
        return await super().end_node(lease, end, now)


def test_a_subclass_that_yields_before_its_end_says_its_ends_are_not_queued() -> None:
    assert ends_queued(_YieldsFirst) is False


class _PassesOn:
    """A wrapper that hands every attribute of the store on, and may yield first."""

    def __init__(self, store: SqliteTaskStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


async def test_a_wrapper_that_passes_attributes_on_is_shielded(tmp_path: Path) -> None:
    async with SqliteTaskStore.open(tmp_path / "x.db") as store:
        assert ends_queued(store) is True
        assert ends_queued(_PassesOn(store)) is False  # its class does not say so


async def test_a_worker_stopped_while_an_end_is_queued_leaves_it_written(tmp_path: Path) -> None:
    """A worker stopped (cancelled: SIGTERM) while a node's end waits in the writer's
    queue: the end is committed before the store closes, the lease handed back after
    it, and the next worker neither runs the node again nor counts an interruption."""
    bodies: list[str] = []
    returning = anyio.Event()
    held = threading.Event()
    in_thread = threading.Event()
    writer_of: list[SqliteTaskStore] = []

    def hold(raw: object) -> None:  # in the writer's thread: the batch after it waits
        in_thread.set()
        held.wait(10)

    flow = Workflow("chain", version="1", input=Empty)

    @flow.node()
    async def first(ctx: NodeContext[Empty]) -> int:
        bodies.append("first")
        writer_of[0].writer.enqueue(hold)  # the end queues behind this write
        await anyio.to_thread.run_sync(in_thread.wait, 10)  # in its own batch, under way
        returning.set()
        return 1

    @flow.node(deps=["first"])
    async def second(ctx: NodeContext[Empty]) -> int:
        bodies.append("second")
        return ctx.output(first) + 1

    path = tmp_path / "stopped.db"
    async with SqliteTaskStore.open(path) as store:
        writer_of.append(store)
        manager = TaskManager(store, runs=store)
        worker = Worker(manager, {flow.name: flow}, settings=FAST, worker_id="w1")
        task = await submit(manager, flow, {})
        try:
            with anyio.fail_after(20):
                async with anyio.create_task_group() as task_group:
                    await task_group.start(worker.run)
                    await returning.wait()
                    assert store.writer._queue  # the end, waiting behind the held batch
                    task_group.cancel_scope.cancel()  # the worker stops, the end still queued
                    held.set()
        finally:
            held.set()  # never leave the writer's thread waiting
        assert bodies == ["first"]
    async with SqliteTaskStore.open(path) as store:
        checkpoint = (await store.checkpoints(task.id))["first"]
        assert checkpoint.state is NodeState.COMPLETED
        assert checkpoint.interruptions == 0
        manager = TaskManager(store, runs=store)
        worker = Worker(manager, {flow.name: flow}, settings=FAST, worker_id="w2")
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            done = await finish(manager, task)
            task_group.cancel_scope.cancel()
        attempts = [(a.node, a.outcome) for a in await store.attempts(task.id)]
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == 2
    assert bodies == ["first", "second"]  # the first node's body ran once
    assert attempts == [
        ("first", AttemptOutcome.COMPLETED),
        ("second", AttemptOutcome.COMPLETED),
    ]


async def test_a_write_that_fails_after_its_caller_stopped_waiting_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An end whose caller was cancelled is no longer awaited (ADR 0056): if its batch
    fails for a reason other than an outage (which logs itself), the writer says so, as
    the runner's caller would have when it waited."""
    held, in_thread = threading.Event(), threading.Event()

    def hold(raw: object) -> None:
        in_thread.set()
        held.wait(10)

    def broken(raw: object) -> None:
        raise RuntimeError("the end's batch broke")

    async with SqliteTaskStore.open(tmp_path / "logged.db") as store:
        try:
            store.writer.enqueue(hold)
            await anyio.to_thread.run_sync(in_thread.wait, 10)
            store.writer.enqueue(broken).cancel()  # its caller stopped waiting
        finally:
            held.set()
        with anyio.fail_after(10):
            await store.writer.submit(lambda raw: None)  # committed after it
    failed = [r for r in caplog.records if r.name == "taskloom.store" and r.exc_info]
    assert [str(r.exc_info[1]) for r in failed if r.exc_info] == ["the end's batch broke"]
