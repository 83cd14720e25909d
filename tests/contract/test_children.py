"""Child workflows, on every store (ADR 0026).

A node starts another workflow as a task of its own (``ctx.child``), linked to its parent;
the parent's run parks while the child runs (no lease, no slot); the child's end, recorded
on the parent in the transaction that ends the child, wakes it; the node re-runs and the
call returns the child's result. A cancel of the parent cancels its children, recursively.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, cast

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import DatabaseUnavailableError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.ports import TaskStore
from taskloom.engine.retry import RetryPolicy
from taskloom.engine.runs import RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker
from taskloom.testing import FakeClock
from tests.contract.harness import FAST, finish, run_store, running
from tests.helpers import eventually


class Number(BaseModel):
    x: int


class Doubled(BaseModel):
    value: int


def _doubler(name: str, gate: anyio.Event | None = None, *, fail: bool = False) -> Workflow[Number]:
    flow = Workflow(name, version="1", input=Number, output=Doubled)

    @flow.node()
    async def double(ctx: NodeContext[Number]) -> Doubled:
        if gate is not None:
            await gate.wait()
        if fail:
            raise ValueError("no doubling today")
        return Doubled(value=ctx.input.x * 2)

    return flow


def _delegating(
    name: str, child: Workflow[Number], calls: list[int], retry: RetryPolicy | None = None
) -> Workflow[Number]:
    flow = Workflow(name, version="1", input=Number)

    @flow.node(retry=retry)
    async def delegate(ctx: NodeContext[Number]) -> int:
        calls.append(ctx.attempt)
        doubled = await ctx.child(child, Number(x=ctx.input.x), output=Doubled)
        return doubled.value + 1

    return flow


async def _parked(manager: TaskManager, task: Task) -> Task:
    with anyio.fail_after(10), manager.subscribe([task.id]) as changes:
        current = await manager.get(task.id)
        while not current.parked:
            assert not current.is_terminal, current
            current = await changes.receive()
        return current


async def _children(manager: TaskManager, task: Task) -> list[Task]:
    return list((await manager.list(parent_id=task.id)).tasks)


async def test_the_parent_parks_while_its_child_runs_and_resumes_with_its_result(
    manager: TaskManager, store: TaskStore
) -> None:
    gate = anyio.Event()
    calls: list[int] = []
    child = _doubler("doubler", gate)
    parent = _delegating("delegating", child, calls)
    async with running(manager, store, parent, child) as worker:
        task = await submit(manager, parent, {"x": 20}, owner="ada")
        await _parked(manager, task)
        (kid,) = await _children(manager, task)
        assert (kid.name, kid.parent_id, kid.owner) == ("doubler", task.id, "ada")
        assert kid.arguments == {"x": 20}
        listed = {t.id: t for t in (await manager.list(owner="ada")).tasks}
        assert listed[kid.id].parent_id == task.id  # visible in list results, linked

        async def only_the_child_runs() -> bool:
            return worker.active_runs == 1

        await eventually(only_the_child_runs)
        held = await run_store(store).renew_leases(
            worker="w1", now=manager.clock.now(), lease_for=timedelta(seconds=10)
        )
        assert set(held) == {kid.id}  # the parent holds no lease while it waits
        gate.set()
        done = await finish(manager, task)
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == 41
    assert calls == [1, 2]  # the node re-ran from its start; the call returned at once
    (kid,) = await _children(manager, task)  # one child, not two
    assert kid.state is TaskState.COMPLETED
    assert kid.result == {"value": 40}
    assert (await manager.get(task.id)).ended_children == [kid.id]


async def test_a_child_that_ended_before_the_parent_parked_is_not_waited_for(
    manager: TaskManager, store: TaskStore
) -> None:
    calls: list[int] = []
    child = _doubler("quick")
    parent = _delegating("impatient", child, calls)
    async with running(manager, store, parent, child):
        done = await finish(manager, await submit(manager, parent, {"x": 1}))
    assert done.result == 3
    assert len(calls) >= 2


async def test_a_child_failure_fails_the_parent_and_a_retry_starts_a_new_child(
    manager: TaskManager, store: TaskStore
) -> None:
    calls: list[int] = []
    child = _doubler("broken", fail=True)
    parent = _delegating("retrying", child, calls, RetryPolicy(max_attempts=2, initial_delay_s=0))
    async with running(manager, store, parent, child):
        task = await submit(manager, parent, {"x": 5})
        done = await finish(manager, task)
    assert done.state is TaskState.FAILED
    assert done.error is not None
    assert done.error.error_type == "ChildFailedError"
    assert "no doubling today" in done.error.message
    kids = await _children(manager, task)
    assert len(kids) == 2  # one per failed attempt of the node
    assert {kid.state for kid in kids} == {TaskState.FAILED}


async def test_a_cancel_of_the_parent_reaches_every_descendant(
    manager: TaskManager, store: TaskStore
) -> None:
    gate = anyio.Event()  # never set: the grandchild runs until cancelled
    leaf = _doubler("leaf", gate)
    middle = _delegating("middle", leaf, [])
    top = Workflow("top", version="1", input=Number)

    @top.node()
    async def start(ctx: NodeContext[Number]) -> int:
        return await ctx.child(middle, {"x": ctx.input.x})  # type: ignore[no-any-return]

    async with running(manager, store, top, middle, leaf) as worker:
        task = await submit(manager, top, {"x": 1})
        await _parked(manager, task)
        (second,) = await _children(manager, task)

        async def leaf_running() -> bool:
            kids = await _children(manager, second)
            return len(kids) == 1 and kids[0].state is TaskState.RUNNING

        await eventually(leaf_running)
        (third,) = await _children(manager, second)
        await manager.cancel(task.id, reason="enough")
        for kid in (second, third):
            ended = await manager.get(kid.id)
            assert ended.state is TaskState.CANCELLED, ended
            assert ended.status_message is not None
            assert "parent task" in ended.status_message

        async def stopped() -> bool:
            return worker.active_runs == 0

        await eventually(stopped)  # the leaf's running node was stopped, too


class _DiesOnWait:
    """A store as a worker sees it that dies (every call fails from then on, as for a
    SIGKILL) when the worker records a node's wait: after the child's creation committed,
    before the parent's wait did."""

    def __init__(self, store: TaskStore) -> None:
        self._store = store
        self.dead = False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.dead or name == "finish_run":
                self.dead = True
                raise DatabaseUnavailableError("killed")
            return await method(*args, **kwargs)

        return call


@asynccontextmanager
async def _doomed(
    store: TaskStore, clock: FakeClock, flow: Workflow[Number]
) -> AsyncIterator[_DiesOnWait]:
    dying = _DiesOnWait(store)
    manager = TaskManager(dying, runs=cast(RunStore, dying), clock=clock)
    worker = Worker(manager, {flow.name: flow}, settings=FAST)
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        yield dying
        task_group.cancel_scope.cancel()


async def test_a_child_is_created_once_across_a_crash(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    calls: list[int] = []
    child = _doubler("once")
    parent = _delegating("crashing", child, calls)
    task = await submit(manager, parent, {"x": 4})
    async with _doomed(store, clock, parent) as dying:

        async def died() -> bool:
            return dying.dead

        await eventually(died)
    (kid,) = await _children(manager, task)
    clock.advance(FAST.lease_s + 1)  # the dead worker's lease has expired
    async with running(manager, store, parent, child):
        done = await finish(manager, task)
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == 9
    assert [k.id for k in await _children(manager, task)] == [kid.id]
    # died before its wait was recorded; re-ran and found the same child (ended already,
    # or waited for it and ran a third time)
    assert calls[:2] == [1, 2]
    assert len(calls) in (2, 3)
