"""Durable waits hold nothing, on every store (ADR 0021).

A node that asks (or sleeps) ends its attempt as ``waiting``; once nothing else of its
run can go on, the run is parked: no lease, no node slot, no run slot. The answer (or the
timer's time) makes the run claimable again and the node re-runs from its start, the
call returning what it waited for at once.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, cast

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import DatabaseUnavailableError, WaitOverError
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import InputRequest, Task
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import AttemptOutcome, NodeEnd, NodeStart, NodeState, RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.waits import NodeWaits, Wait
from taskloom.engine.worker import Worker
from taskloom.testing import FakeClock
from tests.contract.harness import FAST, finish, run_store, running, until_state
from tests.helpers import eventually


class Empty(BaseModel):
    pass


class Confirm(BaseModel):
    go: bool


def _asking_flow(name: str, calls: list[str] | None = None) -> Workflow[Empty]:
    flow = Workflow(name, version="1", input=Empty)

    @flow.node()
    async def decide(ctx: NodeContext[Empty]) -> str:
        if calls is not None:
            calls.append(f"before {ctx.attempt}")
        answer = await ctx.ask("Deploy now?", Confirm)
        return "deployed" if answer.go else "skipped"

    return flow


async def _parked(manager: TaskManager, task: Task) -> Task:
    """The task once its run is parked (bounded)."""
    with anyio.fail_after(10), manager.subscribe([task.id]) as changes:
        current = await manager.get(task.id)
        while not current.parked:
            assert not current.is_terminal, current
            current = await changes.receive()
        return current


async def test_waiting_questions_leave_the_workers_slots_free(
    manager: TaskManager, store: TaskStore
) -> None:
    """max_runs=2: two questions wait, and a third task still runs to its end."""
    asking = _asking_flow("asking")
    plain = Workflow("plain", version="1", input=Empty)

    @plain.node()
    async def work(ctx: NodeContext[Empty]) -> int:
        return 42

    settings = FAST.model_copy(update={"max_runs": 2})
    worker = Worker(manager, {"asking": asking, "plain": plain}, settings=settings)
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        first = await submit(manager, asking)
        second = await submit(manager, asking)
        for task in (first, second):
            await until_state(manager, task, TaskState.INPUT_REQUIRED)
        third = await finish(manager, await submit(manager, plain), within_s=10)
        assert third.result == 42

        async def idle() -> bool:  # the third run's slot frees just after its outcome
            return worker.active_runs == 0

        await eventually(idle)
        for task in (first, second):
            (key,) = (await manager.get(task.id)).input_requests
            await manager.provide_input(task.id, key, {"go": True})
        for task in (first, second):
            assert (await finish(manager, task)).result == "deployed"
        task_group.cancel_scope.cancel()


async def test_a_question_re_runs_its_node_with_the_answer(
    manager: TaskManager, store: TaskStore
) -> None:
    calls: list[str] = []
    flow = _asking_flow("replay", calls)
    async with running(manager, store, flow):
        task = await submit(manager, flow)
        waiting = await _parked(manager, task)
        assert waiting.state is TaskState.INPUT_REQUIRED
        assert waiting.wake_at is None
        assert (
            await run_store(store).renew_leases(
                worker="w1", now=manager.clock.now(), lease_for=timedelta(seconds=10)
            )
            == {}
        )
        (key,) = waiting.input_requests
        assert key == "decide#1"
        await manager.provide_input(task.id, key, {"go": False})
        done = await finish(manager, task)
    assert done.result == "skipped"
    assert calls == ["before 1", "before 2"]  # the code before the wait ran again
    history = [(a.attempt, a.outcome) for a in await run_store(store).attempts(task.id)]
    assert history == [(1, AttemptOutcome.WAITING), (2, AttemptOutcome.COMPLETED)]
    node = (await run_store(store).checkpoints(task.id))["decide"]
    assert (node.interruptions, node.failures) == (0, 0)


class _Killable:
    """A store as a worker sees it, until :meth:`kill`: then every call fails, as for a
    process killed with SIGKILL (its shutdown writes never land)."""

    def __init__(self, store: TaskStore) -> None:
        self._store = store
        self.dead = False
        self.claims = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.dead:
                raise DatabaseUnavailableError("killed")
            result = await method(*args, **kwargs)
            if name == "claim_runs":
                self.claims += 1
            return result

        return call


@asynccontextmanager
async def _killed_after(
    store: TaskStore, clock: FakeClock, flow: Workflow[Empty], worker_id: str
) -> AsyncIterator[_Killable]:
    """A worker that runs until the block ends, then dies without a word."""
    killable = _Killable(store)
    doomed = TaskManager(killable, runs=cast(RunStore, killable), clock=clock)
    worker = Worker(doomed, {flow.name: flow}, settings=FAST, worker_id=worker_id)
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        yield killable
        killable.dead = True
        task_group.cancel_scope.cancel()


async def test_a_question_survives_any_number_of_worker_deaths(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    flow = _asking_flow("survivor")
    task = await submit(manager, flow)
    for death in range(1, 6):
        async with _killed_after(store, clock, flow, f"killed-{death}") as killable:

            async def asked(killable: _Killable = killable, death: int = death) -> bool:
                current = await manager.get(task.id)
                attempts = await run_store(store).attempts(task.id)
                opened = any(a.worker == f"killed-{death}" for a in attempts)
                return (
                    killable.claims > 0 and current.input_requests != {} and (opened or death > 1)
                )

            await eventually(asked)
        clock.advance(FAST.lease_s + 1)  # any lease the dead worker held has expired
    waiting = await manager.get(task.id)
    assert waiting.state is TaskState.INPUT_REQUIRED
    async with running(manager, store, flow):
        await manager.provide_input(task.id, "decide#1", {"go": True})
        done = await finish(manager, task)
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == "deployed"
    node = (await run_store(store).checkpoints(task.id))["decide"]
    assert node.interruptions == 0
    outcomes = [a.outcome for a in await run_store(store).attempts(task.id)]
    assert outcomes == [AttemptOutcome.WAITING, AttemptOutcome.COMPLETED]


async def test_cancelling_a_waiting_task_ends_it(manager: TaskManager, store: TaskStore) -> None:
    flow = _asking_flow("cancelled")
    async with running(manager, store, flow):
        task = await submit(manager, flow)
        await _parked(manager, task)
        cancelled = await manager.cancel(task.id, reason="no longer needed")
        assert cancelled.state is TaskState.CANCELLED
        assert cancelled.input_requests == {}
        assert not cancelled.parked
    claimed = await run_store(store).claim_runs(
        worker="late",
        workflows=frozenset({flow.name}),
        now=manager.clock.now() + timedelta(hours=1),
        lease_for=timedelta(seconds=10),
        limit=10,
        start=claim_start(manager.clock.now()),
    )
    assert claimed == []


async def test_a_durable_sleep_parks_the_run_until_its_time(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    flow = Workflow("nap", version="1", input=Empty)
    calls: list[int] = []

    @flow.node()
    async def nap(ctx: NodeContext[Empty]) -> int:
        calls.append(ctx.attempt)
        await ctx.sleep(60)
        await ctx.sleep(0)  # returns at once, records nothing
        return len(calls)

    async with running(manager, store, flow) as worker:
        task = await submit(manager, flow)
        parked = await _parked(manager, task)
        assert parked.state is TaskState.QUEUED
        assert parked.wake_at == clock.now() + timedelta(seconds=60)
        assert parked.timers == {"nap#sleep1": parked.wake_at}

        async def idle() -> bool:
            return worker.active_runs == 0

        await eventually(idle)
        clock.advance(30)
        await anyio.wait_all_tasks_blocked()
        assert calls == [1]  # not before its time
        clock.advance(31)
        done = await finish(manager, task)
    assert done.result == 2
    assert calls == [1, 2]


async def test_an_answer_that_arrives_while_a_sibling_runs_is_not_lost(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("siblings", version="1", input=Empty)
    release = anyio.Event()

    @flow.node()
    async def decide(ctx: NodeContext[Empty]) -> bool:
        return (await ctx.ask("Go?", Confirm)).go

    @flow.node()
    async def slow(ctx: NodeContext[Empty]) -> int:
        await release.wait()
        return 1

    @flow.node(deps=[decide, slow])
    async def last(ctx: NodeContext[Empty]) -> list[Any]:
        return [ctx.output(decide), ctx.output(slow)]

    async with running(manager, store, flow):
        task = await submit(manager, flow)
        asked = await until_state(manager, task, TaskState.INPUT_REQUIRED)
        await manager.provide_input(task.id, next(iter(asked.input_requests)), {"go": True})
        release.set()
        done = await finish(manager, task)
    assert done.result == [True, 1]


async def _claim(runs: RunStore, manager: TaskManager, worker: str, flow: str) -> list[Any]:
    return list(
        await runs.claim_runs(
            worker=worker,
            workflows=frozenset({flow}),
            now=manager.clock.now(),
            lease_for=timedelta(seconds=10),
            limit=10,
            start=claim_start(manager.clock.now()),
        )
    )


async def test_a_parked_run_has_no_lease_and_an_answer_makes_it_claimable(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    runs = run_store(store)
    task = await manager.create("parked")
    (run,) = await _claim(runs, manager, "w1", "parked")
    await runs.start_node(run.lease, NodeStart(node="n", attempt=1), clock.now())
    wait = Wait("input", "n#1")
    end = NodeEnd(
        node="n",
        attempt=1,
        outcome=AttemptOutcome.WAITING,
        state=NodeState.WAITING,
        waiting_for=wait.encode(),
    )
    question = InputRequest(message="Which?", requested_schema={"type": "object"})
    node, asked = await manager.wait_node(end, NodeWaits(wait, question=question), lease=run.lease)
    assert (node.state, node.waiting_for) == (NodeState.WAITING, "input:n#1")
    assert asked.state is TaskState.INPUT_REQUIRED
    assert set(asked.input_requests) == {"n#1"}

    parked = await manager.park(task.id, [wait], lease=run.lease)
    assert (parked.parked, parked.wake_at, parked.state) == (True, None, TaskState.INPUT_REQUIRED)
    assert await runs.renew_leases(worker="w1", now=clock.now(), lease_for=timedelta(1)) == {}
    clock.advance(600)  # long after the lease would have expired
    assert await _claim(runs, manager, "w2", "parked") == []

    answered = await manager.provide_input(task.id, "n#1", {"pick": 1})
    assert (answered.state, answered.wake_at) == (TaskState.QUEUED, clock.now())
    (again,) = await _claim(runs, manager, "w2", "parked")
    assert again.resumed
    assert (again.task.state, again.task.parked, again.task.wake_at) == (
        TaskState.RUNNING,
        False,
        None,
    )
    assert again.nodes["n"].state is NodeState.WAITING
    assert again.nodes["n"].waiting_for == "input:n#1"
    try:
        await manager.park(task.id, [wait], lease=again.lease)
    except WaitOverError:
        pass
    else:
        raise AssertionError("a wait that is over must not park the run")
    assert (await manager.get(task.id)).parked is False
