"""A run that ends in ``WorkerLost`` leaves no attempt open, on every store.

Two nodes of a run were running when its worker died, three workers in a row. The
next worker gives up on the first (``MAX_INTERRUPTIONS``) and fails the run; the second
waits for the workflow's one concurrency slot and is cancelled before (or while) it is
given up too, so the runner may never end its last attempt. The write that ends the run
does.
"""

from datetime import timedelta

from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.ports import TaskStore
from taskloom.engine.runner import MAX_INTERRUPTIONS
from taskloom.engine.runs import AttemptOutcome, NodeStart, NodeState
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.testing import FakeClock
from tests.contract.harness import finish, run_store, running


class Empty(BaseModel):
    pass


async def test_a_run_that_ends_in_worker_lost_closes_every_attempt(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    calls: list[str] = []
    flow = Workflow("doomed-pair", version="1", input=Empty, max_concurrency=1)

    @flow.node()
    async def first(ctx: NodeContext[Empty]) -> int:
        calls.append("first")
        return 1

    @flow.node()
    async def second(ctx: NodeContext[Empty]) -> int:
        calls.append("second")
        return 2

    runs = run_store(store)
    task = await submit(manager, flow, {})
    for attempt in range(1, MAX_INTERRUPTIONS + 1):  # three workers die mid-node
        (claimed,) = await runs.claim_runs(
            worker=f"crash-{attempt}",
            workflows=frozenset({flow.name}),
            now=clock.now(),
            lease_for=timedelta(seconds=1),
            limit=1,
            start=claim_start(manager.clock.now()),
        )
        for node in ("first", "second"):
            start = NodeStart(
                node=node,
                attempt=attempt,
                interruptions=attempt - 1,
                interrupted_attempt=attempt - 1 if attempt > 1 else None,
            )
            await runs.start_node(claimed.lease, start, clock.now())
        clock.advance(2)

    async with running(manager, store, flow):
        done = await finish(manager, task)

    assert calls == []
    assert done.state is TaskState.FAILED
    assert done.error is not None
    assert done.error.error_type == "WorkerLost"
    history = await runs.attempts(task.id)
    assert len(history) == 2 * MAX_INTERRUPTIONS
    assert [(a.node, a.attempt) for a in history if a.ended_at is None] == []
    assert {a.outcome for a in history} == {AttemptOutcome.INTERRUPTED}
    assert all(a.ended_at is not None and a.ended_at >= a.started_at for a in history)
    nodes = await runs.checkpoints(task.id)
    # The other node was given up too (its write won the race with the cancellation), or
    # its last attempt was closed by the run's end: either way, three interruptions.
    assert [run.state for run in nodes.values()].count(NodeState.FAILED) >= 1
    assert {name: (run.attempt, run.interruptions) for name, run in nodes.items()} == {
        "first": (3, 3),
        "second": (3, 3),
    }
    assert {run.state for run in nodes.values()} <= {NodeState.FAILED, NodeState.RETRYING}
    assert (
        await runs.renew_leases(worker="w1", now=clock.now(), lease_for=timedelta(seconds=1)) == {}
    )


async def test_a_run_that_completes_has_no_attempt_left_open(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    """The closing is for attempts nobody will end: a completed run's are all its own."""
    flow = Workflow("resumed-pair", version="1", input=Empty)

    @flow.node()
    async def only(ctx: NodeContext[Empty]) -> int:
        return 7

    runs = run_store(store)
    task = await submit(manager, flow, {})
    (claimed,) = await runs.claim_runs(
        worker="crash",
        workflows=frozenset({flow.name}),
        now=clock.now(),
        lease_for=timedelta(seconds=1),
        limit=1,
        start=claim_start(manager.clock.now()),
    )
    await runs.start_node(claimed.lease, NodeStart(node="only", attempt=1), clock.now())
    clock.advance(2)
    async with running(manager, store, flow):
        done = await finish(manager, task)
    assert done.state is TaskState.COMPLETED
    history = await runs.attempts(task.id)
    assert [(a.attempt, a.outcome) for a in history] == [
        (1, AttemptOutcome.INTERRUPTED),
        (2, AttemptOutcome.COMPLETED),
    ]
