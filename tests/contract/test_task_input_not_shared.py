"""A workflow that changes its input in place changes neither the task's stored
arguments nor another read of the task, on any store (the in-memory store holds task
objects; the SQL stores keep a large body's shape, ADR 0051): the run parses a copy."""

from typing import Any

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.ports import TaskStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.testing import FakeClock
from taskloom.validation import JsonSchemaValidator

DATA = [f"item {index}" for index in range(1000)]  # a body of 8 KB or more


class Large(BaseModel):
    data: Any  # validated as it is: the node's input is the task's own list


async def test_a_node_changing_its_input_does_not_change_the_task(
    store: TaskStore, clock: FakeClock
) -> None:
    manager = TaskManager(store, clock=clock, validator=JsonSchemaValidator())
    flow = Workflow("changes_input", version="1", input=Large)

    @flow.node()
    async def change(ctx: NodeContext[Large]) -> int:
        ctx.input.data.append("changed")
        return len(ctx.input.data)

    worker = Worker(
        manager,
        {flow.name: flow},
        settings=WorkerSettings(poll_s=0.05, progress_interval_s=0, input_recheck_s=None),
        worker_id="w1",
    )
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        task = await submit(manager, flow, {"data": DATA})
        with anyio.fail_after(20):
            done = await manager.wait_until_terminal(task.id)
        task_group.cancel_scope.cancel()
    assert done.state is TaskState.COMPLETED
    assert done.result == len(DATA) + 1
    assert done.arguments == {"data": DATA}
    assert (await manager.get(task.id)).arguments == {"data": DATA}


async def test_a_node_changing_a_nested_value_of_its_input_does_not_change_the_task(
    store: TaskStore, clock: FakeClock
) -> None:
    """The copy goes all the way down: an object in an array in an object is the run's own."""
    manager = TaskManager(store, clock=clock, validator=JsonSchemaValidator())
    flow = Workflow("changes_nested", version="1", input=Large)

    @flow.node()
    async def change(ctx: NodeContext[Large]) -> int:
        ctx.input.data["items"][0]["tags"].append("changed")
        ctx.input.data["items"][1]["n"] = 0
        return 1

    worker = Worker(
        manager,
        {flow.name: flow},
        settings=WorkerSettings(poll_s=0.05, progress_interval_s=0, input_recheck_s=None),
    )
    nested = {"items": [{"tags": ["a"], "n": 1.5}, {"n": 2, "none": None, "yes": True}]}
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        task = await submit(manager, flow, {"data": nested})
        with anyio.fail_after(20):
            done = await manager.wait_until_terminal(task.id)
        task_group.cancel_scope.cancel()
    assert done.state is TaskState.COMPLETED
    original = {"items": [{"tags": ["a"], "n": 1.5}, {"n": 2, "none": None, "yes": True}]}
    assert done.arguments == {"data": original}
    assert (await manager.get(task.id)).arguments == {"data": original}
