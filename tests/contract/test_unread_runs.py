"""The runs other processes queue while a worker is full are read once a claim comes back
short (ADR 0050, amended): those reads never hold up the worker's claims, and a store
that fails them is never the claim's failure."""

from datetime import timedelta
from typing import Any

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import StoreUnavailableError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.ports import TaskStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from tests.helpers import eventually

QUIET = WorkerSettings(max_runs=1, poll_s=3600, progress_interval_s=0, input_recheck_s=None)
"""One slot, no polling: every claim is one the worker chose to make."""


class Hold(BaseModel):
    hold: bool = False


def _flow(release: anyio.Event) -> Workflow[Hold]:
    flow = Workflow("job", version="1", input=Hold)

    @flow.node()
    async def work(ctx: NodeContext[Hold]) -> str:
        if ctx.input.hold:
            await release.wait()
        return "done"

    return flow


async def _queued_elsewhere(manager: TaskManager, store: TaskStore) -> Task:
    """A run another process creates and announces (as PostgreSQL's NOTIFY would)."""
    draft = manager.draft("job", {}, workflow_version="1")
    task = (await store.create(draft, draft.created_at))[0]
    await manager.notice(task.id, TaskState.QUEUED.value)
    return task


async def _unread_while_full(
    manager: TaskManager, store: TaskStore, worker: Worker, release: anyio.Event, flow: Any
) -> Task:
    """Fill the worker's one slot, queue a run elsewhere (not read: the worker is full),
    which another worker then takes; end the run that held the slot."""
    await eventually(lambda: _idle(worker))
    busy = await submit(manager, flow, {"hold": True})
    assert busy.state is TaskState.RUNNING  # eagerly: every slot taken
    unread = await _queued_elsewhere(manager, store)
    (taken,) = await manager.claim(
        worker="elsewhere",
        workflows=frozenset({("job", "1")}),
        lease_for=timedelta(seconds=600),
        limit=1,
    )
    assert taken.task.id == unread.id
    return busy


async def test_reading_the_unread_runs_does_not_hold_up_a_claim(
    manager: TaskManager, store: TaskStore
) -> None:
    """While the worker reads the runs it did not read when full (a slow store: the read
    waits here), a run queued meanwhile is claimed and run, not after the reads."""
    release, gate, reading = anyio.Event(), anyio.Event(), anyio.Event()
    flow = _flow(release)
    worker = Worker(manager, {"job": flow}, settings=QUIET)
    get = manager.get
    slow: set[str] = set()

    async def slow_get(task_id: str, **kwargs: Any) -> Task:
        if task_id in slow:
            reading.set()
            await gate.wait()
        return await get(task_id, **kwargs)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            busy = await _unread_while_full(manager, store, worker, release, flow)
            slow.update(worker._unread)
            manager.get = slow_get  # type: ignore[method-assign]
            release.set()  # the slot frees up: the claim comes back short, the reads begin
            await reading.wait()
            later = await _queued_elsewhere(manager, store)
            done = await manager.wait_until_terminal(later.id)
            assert done.state is TaskState.COMPLETED
            gate.set()
            await manager.wait_until_terminal(busy.id)
            task_group.cancel_scope.cancel()


async def test_a_store_that_fails_the_reads_is_not_a_failed_claim(
    manager: TaskManager, store: TaskStore, caplog: Any
) -> None:
    """A read of an unread run that the store fails is logged as such (below WARNING for
    an outage), not as the claim's failure: the claim took its runs."""
    release = anyio.Event()
    flow = _flow(release)
    worker = Worker(manager, {"job": flow}, settings=QUIET)
    get = manager.get
    failing: set[str] = set()
    tried = anyio.Event()

    async def failing_get(task_id: str, **kwargs: Any) -> Task:
        if task_id in failing:
            tried.set()
            raise StoreUnavailableError("the database is down")
        return await get(task_id, **kwargs)

    caplog.set_level("DEBUG", logger="taskloom.engine.worker")
    with anyio.fail_after(20):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            busy = await _unread_while_full(manager, store, worker, release, flow)
            failing.update(worker._unread)
            manager.get = failing_get  # type: ignore[method-assign]
            release.set()
            await tried.wait()
            await manager.wait_until_terminal(busy.id)
            later = await _queued_elsewhere(manager, store)  # the worker still claims
            assert (await manager.wait_until_terminal(later.id)).state is TaskState.COMPLETED
            task_group.cancel_scope.cancel()
    messages = [record.getMessage() for record in caplog.records]
    assert not [message for message in messages if "claim failed" in message], messages


async def _idle(worker: Worker) -> bool:
    return worker._idle
