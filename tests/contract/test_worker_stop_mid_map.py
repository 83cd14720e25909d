"""A worker told to stop in the middle of a map stops starting its items (ADR 0047): on
every store, PostgreSQL included, whose node writes are shielded from cancellation."""

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import MapContext, NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.ports import TaskStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from tests.contract.harness import running

ITEMS = 500
SEEN = 20


class Count(BaseModel):
    n: int


async def test_items_stop_when_the_worker_stops(manager: TaskManager, store: TaskStore) -> None:
    flow = Workflow("stop_mid_map", version="1", input=Count)
    calls: list[int] = []
    seen = anyio.Event()

    @flow.node()
    async def items(ctx: NodeContext[Count]) -> list[int]:
        return list(range(ctx.input.n))

    @flow.map(over=items, concurrency=2)
    async def work(ctx: MapContext[Count, int]) -> int:  # never awaits: the store must stop it
        calls.append(ctx.index)
        if len(calls) == SEEN:
            seen.set()
        return ctx.index

    with anyio.fail_after(60):
        async with running(manager, store, flow):
            task = await submit(manager, flow, {"n": ITEMS})
            await seen.wait()
            at_stop = len(calls)
        after = len(calls) - at_stop
    assert after <= 2, f"{after} items ran after the worker was told to stop"
    assert (await manager.get(task.id)).state is TaskState.RUNNING  # the next worker resumes it
