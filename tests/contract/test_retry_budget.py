"""Two budgets, on every store: failures count against ``max_attempts``, worker deaths
against ``max_interruptions`` (ADR 0004, ADR 0021), never one against the other."""

from datetime import timedelta

from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import Task
from taskloom.engine.ports import TaskStore
from taskloom.engine.retry import RetryPolicy
from taskloom.engine.runs import AttemptOutcome, NodeStart, NodeState
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.testing import FakeClock
from tests.contract.harness import finish, run_store, running


class Empty(BaseModel):
    pass


async def _killed(
    manager: TaskManager, store: TaskStore, clock: FakeClock, flow: Workflow[Empty], deaths: int
) -> Task:
    """A task whose node ``only`` was running when its worker died, *deaths* times."""
    runs = run_store(store)
    task = await submit(manager, flow)
    for attempt in range(1, deaths + 1):
        (claimed,) = await runs.claim_runs(
            worker=f"killed-{attempt}",
            workflows=frozenset({flow.name}),
            now=clock.now(),
            lease_for=timedelta(seconds=1),
            limit=1,
            start=claim_start(manager.clock.now()),
        )
        start = NodeStart(
            node="only",
            attempt=attempt,
            interruptions=attempt - 1,
            interrupted_attempt=attempt - 1 if attempt > 1 else None,
        )
        await runs.start_node(claimed.lease, start, clock.now())
        clock.advance(2)  # the lease expires: the next worker takes the run over
    return task


async def test_an_interrupted_attempt_uses_no_retry(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    """max_attempts=2, a kill during attempt 1, one real failure in attempt 2: retried."""
    flow = Workflow("budget", version="1", input=Empty)
    calls: list[int] = []

    @flow.node(retry=RetryPolicy(max_attempts=2, initial_delay_s=0, jitter=False))
    async def only(ctx: NodeContext[Empty]) -> int:
        calls.append(ctx.attempt)
        if len(calls) == 1:
            raise ConnectionError("flaky")
        return ctx.attempt

    task = await _killed(manager, store, clock, flow, deaths=1)
    async with running(manager, store, flow):
        done = await finish(manager, task)
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == 3
    assert calls == [2, 3]
    history = [(a.attempt, a.outcome) for a in await run_store(store).attempts(task.id)]
    assert history == [
        (1, AttemptOutcome.INTERRUPTED),
        (2, AttemptOutcome.FAILED),
        (3, AttemptOutcome.COMPLETED),
    ]
    node = (await run_store(store).checkpoints(task.id))["only"]
    assert (node.attempt, node.failures, node.interruptions) == (3, 1, 1)


async def test_failures_still_end_the_node_when_the_budget_is_spent(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    flow = Workflow("spent", version="1", input=Empty)
    calls: list[int] = []

    @flow.node(retry=RetryPolicy(max_attempts=2, initial_delay_s=0, jitter=False))
    async def only(ctx: NodeContext[Empty]) -> int:
        calls.append(ctx.attempt)
        raise ConnectionError(f"down {ctx.attempt}")

    task = await _killed(manager, store, clock, flow, deaths=2)
    async with running(manager, store, flow):
        done = await finish(manager, task)
    assert done.state is TaskState.FAILED
    assert calls == [3, 4]  # two deaths, then two real failures
    assert done.error is not None
    assert done.error.error_type == "ConnectionError"


async def test_the_interruption_limit_is_the_policys(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    """Four deaths fail a node with the default limit (3) but not one allowed five."""
    flow = Workflow("tough", version="1", input=Empty)

    @flow.node(retry=RetryPolicy(max_interruptions=5))
    async def only(ctx: NodeContext[Empty]) -> int:
        return ctx.attempt

    task = await _killed(manager, store, clock, flow, deaths=4)
    async with running(manager, store, flow):
        done = await finish(manager, task)
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == 5
    node = (await run_store(store).checkpoints(task.id))["only"]
    assert (node.state, node.interruptions, node.failures) == (NodeState.COMPLETED, 4, 0)


async def test_one_death_fails_a_node_allowed_none_more(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    flow = Workflow("fragile", version="1", input=Empty)

    @flow.node(retry=RetryPolicy(max_attempts=5, max_interruptions=1))
    async def only(ctx: NodeContext[Empty]) -> int:
        raise AssertionError("must not run again")

    task = await _killed(manager, store, clock, flow, deaths=1)
    async with running(manager, store, flow):
        done = await finish(manager, task)
    assert done.state is TaskState.FAILED
    assert done.error is not None
    assert done.error.error_type == "WorkerLost"
    assert "stopped 1 times" in done.error.message
