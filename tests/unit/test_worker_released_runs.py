"""A run another process's worker hands back, announced as ``released`` (PostgreSQL's
release statement, ADR 0066), is claimed by a worker with a free slot at once, and by a full
worker as soon as a slot frees up; never at the next poll, 600 s away here."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from taskloom.engine.events import RELEASED
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.states import TaskState
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.testing import InMemoryTaskStore
from taskloom.workflows.countdown import countdown
from tests.helpers import eventually

SLOW = {"start": 2, "tick_s": 60}  # a lane sleeps a minute between writes: only a stop ends it
SETTINGS = WorkerSettings(max_runs=1, poll_s=600, lease_s=600, eager_start=False)


def _worker(manager: TaskManager, *, eager_start: bool = False) -> Worker:
    settings = SETTINGS.model_copy(update={"eager_start": eager_start})
    return Worker(manager, {countdown.name: countdown}, settings=settings)


async def _running_in(worker: Worker, task: Task) -> bool:
    return worker.executes(task.id)


async def _idle(worker: Worker) -> bool:
    return worker._idle  # as tests/contract/test_unread_runs.py reads it


@asynccontextmanager
async def running_elsewhere(elsewhere: TaskManager, task: Task) -> AsyncIterator[None]:
    """*task* running in a worker of *elsewhere* (another process) while the block runs;
    then that worker stops and hands the run back (its lease released, the task still
    running). This process hears nothing of it: no row of the task changed."""
    stopping = _worker(elsewhere)
    async with anyio.create_task_group() as group:
        await group.start(stopping.run)
        await eventually(lambda: _running_in(stopping, task))
        yield
        group.cancel_scope.cancel()
    assert (await elsewhere.get(task.id)).state is TaskState.RUNNING


async def test_a_worker_with_a_free_slot_claims_a_released_run_at_once() -> None:
    store = InMemoryTaskStore()
    here, elsewhere = TaskManager(store), TaskManager(store)  # two processes on one store
    task = await elsewhere.create(countdown.name, SLOW)
    taking_over = _worker(here)
    async with anyio.create_task_group() as group:
        async with running_elsewhere(elsewhere, task):
            await group.start(taking_over.run)
            await eventually(lambda: _idle(taking_over))  # its first claim found it leased
        assert not taking_over.executes(task.id)
        await here.notice(task.id, RELEASED)
        await eventually(lambda: _running_in(taking_over, task))
        group.cancel_scope.cancel()


async def test_a_full_worker_claims_a_released_run_once_a_slot_frees_up() -> None:
    store = InMemoryTaskStore()
    here, elsewhere = TaskManager(store), TaskManager(store)
    taking_over = _worker(here, eager_start=True)  # full by an eager start: no claim saw it
    async with anyio.create_task_group() as group:
        await group.start(taking_over.run)
        await eventually(lambda: _idle(taking_over))  # its first claim found nothing
        busy = await here.create(countdown.name, SLOW)
        assert taking_over.executes(busy.id)  # its one slot is taken
        task = await elsewhere.create(countdown.name, SLOW)  # this process hears nothing
        async with running_elsewhere(elsewhere, task):
            pass
        await here.notice(task.id, RELEASED)
        await here.cancel(busy.id)
        await eventually(lambda: _running_in(taking_over, task))
        group.cancel_scope.cancel()
