"""What a trivial run writes to its task: no progress line that its outcome repeats."""

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.ports import TaskStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings


class Empty(BaseModel):
    pass


@pytest.mark.anyio
async def test_a_one_node_run_writes_its_task_only_to_start_and_to_complete_it(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("noop", version="1", input=Empty)

    @flow.node()
    async def answer(ctx: NodeContext[Empty]) -> str:
        return "ok"

    settings = WorkerSettings(poll_s=0.05, progress_interval_s=0, input_recheck_s=None)
    worker = Worker(manager, {flow.name: flow}, settings=settings)
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        created = await submit(manager, flow)
        with anyio.fail_after(20):
            done = await manager.wait_until_terminal(created.id)
        task_group.cancel_scope.cancel()
    assert done.state is TaskState.COMPLETED
    assert done.version == created.version + 2  # started, completed: no progress write between
    assert done.status_message == "completed 1 node in 1 phase"
