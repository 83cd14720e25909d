"""Run workflows on a real Worker over any store, for the contract tests of built-ins."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio

from taskloom.engine.dag import Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.worker import Worker, WorkerSettings

FAST = WorkerSettings(poll_s=0.05, progress_interval_s=0, input_recheck_s=None)


def run_store(store: TaskStore) -> RunStore:
    """The store's run side (both stores implement it)."""
    return cast(RunStore, store)


@asynccontextmanager
async def running(
    manager: TaskManager, store: TaskStore, *workflows: Workflow[Any]
) -> AsyncIterator[Worker]:
    """A worker executing *workflows* until the block ends."""
    worker = Worker(
        manager,
        {workflow.name: workflow for workflow in workflows},
        settings=FAST,
        worker_id="w1",
    )
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        yield worker
        task_group.cancel_scope.cancel()


async def finish(manager: TaskManager, task: Task, within_s: float = 30) -> Task:
    """The task once it ended (bounded)."""
    with anyio.fail_after(within_s):
        return await manager.wait_until_terminal(task.id)


async def until_state(manager: TaskManager, task: Task, state: TaskState) -> Task:
    """The task once it reached *state* (bounded)."""
    with anyio.fail_after(20), manager.subscribe([task.id]) as changes:
        current = await manager.get(task.id)
        while current.state is not state:
            assert not current.is_terminal, current
            current = await changes.receive()
        return current
