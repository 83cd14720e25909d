"""RunStore.finish_run on every store: a run's last node end and the task's outcome commit
together (one transaction), or nothing is written."""

from datetime import timedelta
from typing import Any, cast

import pytest

from taskloom.engine.errors import IllegalTransitionError, LeaseLostError, TaskNotFoundError
from taskloom.engine.manager import DEFAULT, Sentinel, TaskManager, claim_start
from taskloom.engine.models import Progress, Task
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import (
    AttemptOutcome,
    Lease,
    NodeAttempt,
    NodeEnd,
    NodeRun,
    NodeStart,
    NodeState,
    RunStore,
)
from taskloom.engine.states import TaskState
from taskloom.testing import FakeClock

LEASE_FOR = timedelta(seconds=10)
END = NodeEnd(
    node="only",
    attempt=1,
    outcome=AttemptOutcome.COMPLETED,
    state=NodeState.COMPLETED,
    output={"n": 1},
)

Written = tuple[Task | None, dict[str, NodeRun], list[NodeAttempt]]


def _runs(store: TaskStore) -> RunStore:
    return cast(RunStore, store)


async def _running_node(
    manager: TaskManager,
    store: TaskStore,
    clock: FakeClock,
    *,
    worker: str = "w",
    ttl_ms: int | Sentinel | None = DEFAULT,
) -> Lease:
    """A claimed run of a new task whose node ``only`` runs its first attempt."""
    await manager.create("job", ttl_ms=ttl_ms)  # type: ignore[arg-type]
    (claimed,) = await _runs(store).claim_runs(
        worker=worker,
        workflows=frozenset({"job"}),
        now=clock.now(),
        lease_for=LEASE_FOR,
        limit=1,
        start=claim_start(manager.clock.now()),
    )
    await _runs(store).start_node(claimed.lease, NodeStart(node="only", attempt=1), clock.now())
    return claimed.lease


async def _written(store: TaskStore, clock: FakeClock, lease: Lease) -> Written:
    """What the store holds of the run: the task, its checkpoints and its attempts."""
    runs = _runs(store)
    task = await store.get(lease.task_id, clock.now())
    return task, await runs.checkpoints(lease.task_id), list(await runs.attempts(lease.task_id))


async def _holds(store: TaskStore, clock: FakeClock, worker: str, task_id: str) -> bool:
    held = await _runs(store).renew_leases(worker=worker, now=clock.now(), lease_for=LEASE_FOR)
    return task_id in held


async def _complete(manager: TaskManager, store: TaskStore, lease: Lease, end: NodeEnd) -> Any:
    return await manager.complete_run(
        end,
        {"result": 1},
        status_message="all done",
        progress=Progress(completed=1, total=1),
        lease=lease,
    )


async def test_the_last_node_end_and_the_completion_commit_together(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    lease = await _running_node(manager, store, clock)
    running = await manager.get(lease.task_id)
    clock.advance(1)
    with manager.subscribe([lease.task_id]) as changes:
        run, task = await _complete(manager, store, lease, END)
        assert await changes.receive() == task
    assert (run.state, run.attempt, run.output, run.updated_at) == (
        NodeState.COMPLETED,
        1,
        {"n": 1},
        clock.now(),
    )
    assert task.state is TaskState.COMPLETED
    assert (task.result, task.status_message) == ({"result": 1}, "all done")
    assert task.progress == Progress(completed=1, total=1)
    assert task.version == running.version + 1
    stored, checkpoints, attempts = await _written(store, clock, lease)
    assert stored == task
    assert checkpoints == {"only": run}
    ((attempt),) = attempts
    assert (attempt.outcome, attempt.ended_at) == (AttemptOutcome.COMPLETED, clock.now())
    assert not await _holds(store, clock, "w", lease.task_id)  # a terminal write drops it


async def test_a_write_that_does_not_end_the_task_keeps_the_lease(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    lease = await _running_node(manager, store, clock)
    clock.advance(1)

    def mutate(task: Task) -> Task:
        return task.model_copy(
            update={
                "status_message": "still going",
                "version": task.version + 1,
                "updated_at": clock.now(),
            }
        )

    run, task = await _runs(store).finish_run(lease, END, clock.now(), mutate)
    assert run.state is NodeState.COMPLETED
    assert (task.state, task.status_message) == (TaskState.RUNNING, "still going")
    assert await store.get(task.id, clock.now()) == task
    assert await _holds(store, clock, "w", task.id)


async def test_a_lost_lease_writes_nothing(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    lease = await _running_node(manager, store, clock)
    clock.advance(LEASE_FOR.total_seconds() + 1)
    (stolen,) = await _runs(store).claim_runs(
        worker="thief",
        workflows=frozenset({"job"}),
        now=clock.now(),
        lease_for=LEASE_FOR,
        limit=1,
        start=claim_start(manager.clock.now()),
    )
    before = await _written(store, clock, lease)
    with pytest.raises(LeaseLostError):
        await _complete(manager, store, lease, END)
    assert await _written(store, clock, lease) == before
    assert before[1]["only"].state is NodeState.RUNNING
    assert await _holds(store, clock, "thief", stolen.task.id)


async def test_a_task_cancelled_meanwhile_stays_cancelled_and_its_node_can_still_end(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    lease = await _running_node(manager, store, clock)
    cancelled = await manager.cancel(lease.task_id, reason="stop")
    before = await _written(store, clock, lease)
    with pytest.raises(IllegalTransitionError):
        await _complete(manager, store, lease, END)
    assert await _written(store, clock, lease) == before
    assert before[0] == cancelled
    assert before[1]["only"].state is NodeState.RUNNING
    assert before[2][0].ended_at is None
    assert await _holds(store, clock, "w", lease.task_id)  # a refused write drops nothing
    ended = await _runs(store).end_node(lease, END, clock.now())  # what the runner does next
    assert (ended.state, ended.output) == (NodeState.COMPLETED, {"n": 1})
    assert (await manager.get(lease.task_id)).state is TaskState.CANCELLED


@pytest.mark.parametrize("which", ["ended", "another_attempt", "never_started"])
async def test_a_node_that_is_not_running_writes_nothing(
    manager: TaskManager, store: TaskStore, clock: FakeClock, which: str
) -> None:
    lease = await _running_node(manager, store, clock)
    end = END
    if which == "ended":
        await _runs(store).end_node(lease, END, clock.now())
    elif which == "another_attempt":
        end = END.model_copy(update={"attempt": 2})
    else:
        end = END.model_copy(update={"node": "ghost"})
    before = await _written(store, clock, lease)
    with pytest.raises(LeaseLostError, match="is not running"):
        await _complete(manager, store, lease, end)
    assert await _written(store, clock, lease) == before
    assert before[0] is not None
    assert before[0].state is TaskState.RUNNING
    assert await _holds(store, clock, "w", lease.task_id)


async def test_a_task_that_expired_writes_nothing(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    lease = await _running_node(manager, store, clock, ttl_ms=1_000)
    clock.advance(2)
    before = await _written(store, clock, lease)
    with pytest.raises(TaskNotFoundError):
        await _complete(manager, store, lease, END)
    assert await _written(store, clock, lease) == before
    assert before[0] is None  # expired: invisible
    assert before[1]["only"].state is NodeState.RUNNING
