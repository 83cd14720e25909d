"""Items of a map that wait (``ctx.ask``, ``ctx.sleep``), on every store (ADR 0021, 0024).

A waiting item ends its attempt as ``waiting`` and gives its place in the map back at
once: with a map concurrency of 1, the other items run while it waits. Once nothing else
can go on, the run parks (no lease, no run slot); the answer or the timer makes it
claimable, the item runs again from its start and the map's output keeps item order.
"""

from datetime import timedelta

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import MapContext, NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import AttemptOutcome, NodeState
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.testing import FakeClock
from tests.contract.harness import finish, run_store, running
from tests.helpers import eventually

ITEMS = ["a", "b", "c", "d"]


class Empty(BaseModel):
    pass


class Label(BaseModel):
    label: str


def _flow(name: str, waiting: str, calls: list[tuple[str, int]]) -> Workflow[Empty]:
    """list -> map(one at a time; item 0 waits the way *waiting* says) -> join."""
    flow = Workflow(name, version="1", input=Empty)

    @flow.node()
    async def letters(ctx: NodeContext[Empty]) -> list[str]:
        return ITEMS

    @flow.map(over=letters, concurrency=1)
    async def label(ctx: MapContext[Empty, str]) -> str:
        calls.append((ctx.item, ctx.attempt))
        if ctx.index == 0 and waiting == "ask":
            answer = await ctx.ask(f"Label for {ctx.item}?", Label)
            return answer.label
        if ctx.index == 0 and waiting == "sleep":
            await ctx.sleep(60)
        return ctx.item.upper()

    @flow.node(deps=[label])
    async def join(ctx: NodeContext[Empty]) -> str:
        labels: list[str] = ctx.output(label)
        return "".join(labels)

    return flow


async def _parked(manager: TaskManager, task: Task) -> Task:
    """The task once its run is parked (bounded)."""
    with anyio.fail_after(20), manager.subscribe([task.id]) as changes:
        current = await manager.get(task.id)
        while not current.parked:
            assert not current.is_terminal, current
            current = await changes.receive()
        return current


async def _holds_nothing(manager: TaskManager, store: TaskStore, task: Task) -> None:
    held = await run_store(store).renew_leases(
        worker="w1", now=manager.clock.now(), lease_for=timedelta(seconds=10)
    )
    assert task.id not in held


async def test_an_item_that_asks_parks_the_run_and_lets_the_other_items_run(
    manager: TaskManager, store: TaskStore
) -> None:
    calls: list[tuple[str, int]] = []
    flow = _flow("asking_items", "ask", calls)
    async with running(manager, store, flow) as worker:
        task = await submit(manager, flow)
        parked = await _parked(manager, task)
        assert parked.state is TaskState.INPUT_REQUIRED
        assert list(parked.input_requests) == ["label[0]#1"]
        # the other items ran while item 0 waited, though the map runs one at a time
        assert sorted(calls) == [("a", 1), ("b", 1), ("c", 1), ("d", 1)]
        checkpoints = await run_store(store).checkpoints(task.id)
        assert checkpoints["label[0]"].state is NodeState.WAITING
        assert all(checkpoints[f"label[{i}]"].state is NodeState.COMPLETED for i in (1, 2, 3))
        assert "join" not in checkpoints

        async def idle() -> bool:
            return worker.active_runs == 0

        await eventually(idle)
        await _holds_nothing(manager, store, task)

        await manager.provide_input(task.id, "label[0]#1", {"label": "x"})
        done = await finish(manager, task)
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == "xBCD"  # item order, the answer in item 0's place
    assert sorted(calls) == [("a", 1), ("a", 2), ("b", 1), ("c", 1), ("d", 1)]
    history = [
        (a.attempt, a.outcome)
        for a in await run_store(store).attempts(task.id)
        if a.node == "label[0]"
    ]
    assert history == [(1, AttemptOutcome.WAITING), (2, AttemptOutcome.COMPLETED)]


async def test_an_item_that_sleeps_parks_the_run_until_its_timer(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    calls: list[tuple[str, int]] = []
    flow = _flow("sleeping_items", "sleep", calls)
    async with running(manager, store, flow) as worker:
        task = await submit(manager, flow)
        parked = await _parked(manager, task)
        assert parked.state is TaskState.QUEUED
        assert parked.wake_at == parked.timers["label[0]#sleep1"]
        assert parked.wake_at is not None
        assert sorted(calls) == [("a", 1), ("b", 1), ("c", 1), ("d", 1)]

        async def idle() -> bool:
            return worker.active_runs == 0

        await eventually(idle)
        await _holds_nothing(manager, store, task)

        clock.advance(61)  # the polls claim the run once its timer is due
        done = await finish(manager, task)
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == "ABCD"
    assert sorted(calls) == [("a", 1), ("a", 2), ("b", 1), ("c", 1), ("d", 1)]
