"""Writes of a task are serialised by the store (ADR 0032), also across processes: a
second store on the same database stands for another process. Every store refuses a
node start in an ended task, and a worker's heartbeat stops a node whose task another
process cancelled."""

from collections.abc import AsyncIterator, Awaitable
from datetime import timedelta

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import IllegalTransitionError, TaskStateError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import InputRequest, Task, TaskFailure
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import AttemptOutcome, ClaimedRun, NodeStart, NodeState
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.persistence.postgres import PostgresTaskStore
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.testing import FakeClock
from tests.helpers import eventually

LEASE = timedelta(seconds=30)
QUESTION = InputRequest(message="?", requested_schema={"type": "integer"})


class Empty(BaseModel):
    pass


@pytest.fixture
async def twin(store: TaskStore) -> AsyncIterator[TaskStore]:
    """The database of *store* opened a second time, as another process opens it (the
    in-memory store has no second opening: the same store, without this process's
    change feed, since the twin's manager is another one)."""
    if isinstance(store, SqliteTaskStore):
        async with SqliteTaskStore.open(store.settings) as other:
            yield other
    elif isinstance(store, PostgresTaskStore):
        async with PostgresTaskStore.open(store.settings) as other:
            yield other
    else:
        yield store


@pytest.fixture
def elsewhere(twin: TaskStore, clock: FakeClock) -> TaskManager:
    """A TaskManager in "another process": over the twin store, with its own feed."""
    return TaskManager(twin, clock=clock)


async def _claimed(manager: TaskManager, name: str = "flow") -> ClaimedRun:
    """A new task of *name*, claimed by worker ``w`` (so running)."""
    await manager.create(name)
    (run,) = await manager.claim(worker="w", workflows=frozenset({name}), lease_for=LEASE, limit=1)
    return run


async def _running(manager: TaskManager, name: str = "flow") -> Task:
    return (await _claimed(manager, name)).task


async def test_answers_from_two_processes_at_once_all_land(
    manager: TaskManager, elsewhere: TaskManager
) -> None:
    task = await _running(manager)
    keys = [f"q{index}" for index in range(10)]
    for key in keys:
        task = await manager.require_input(task.id, key, QUESTION)
    asked = task.version

    async with anyio.create_task_group() as task_group:
        for index, key in enumerate(keys):
            writer = manager if index % 2 else elsewhere
            task_group.start_soon(writer.provide_input, task.id, key, index)

    answered = await manager.get(task.id)
    assert answered.input_responses == {key: index for index, key in enumerate(keys)}
    assert answered.input_requests == {}
    assert answered.state is TaskState.RUNNING
    assert answered.version == asked + len(keys)  # one version per write: none lost


async def test_a_cancel_racing_a_completion_from_another_process_has_one_winner(
    manager: TaskManager, elsewhere: TaskManager
) -> None:
    for round_ in range(5):
        task = await _running(manager, f"flow{round_}")
        outcomes: dict[str, Task | IllegalTransitionError] = {}
        async with anyio.create_task_group() as task_group:
            complete = manager.complete(task.id, round_)
            task_group.start_soon(_outcome, outcomes, "complete", complete)
            task_group.start_soon(_outcome, outcomes, "cancel", elsewhere.cancel(task.id))

        won = [name for name, outcome in outcomes.items() if isinstance(outcome, Task)]
        assert len(won) == 1, outcomes
        stored = await manager.get(task.id)
        expected = TaskState.COMPLETED if won == ["complete"] else TaskState.CANCELLED
        assert stored.state is expected
        assert stored.version == task.version + 1


async def _outcome(
    outcomes: dict[str, Task | IllegalTransitionError], name: str, write: Awaitable[Task]
) -> None:
    try:
        outcomes[name] = await write
    except IllegalTransitionError as error:
        outcomes[name] = error


@pytest.mark.parametrize("ending", ["cancel", "fail"])
async def test_no_node_starts_in_an_ended_task(
    manager: TaskManager, elsewhere: TaskManager, clock: FakeClock, ending: str
) -> None:
    run = await _claimed(manager)
    task, lease = run.task, run.lease
    if ending == "cancel":
        await elsewhere.cancel(task.id)
    else:  # a failure written without the lease (an operator), which keeps it
        await elsewhere.fail(task.id, TaskFailure(code="stopped", message="stopped"))

    with pytest.raises(TaskStateError):
        await manager.runs.start_node(lease, NodeStart(node="n", attempt=1), clock.now())
    assert await manager.runs.checkpoints(task.id) == {}
    assert await manager.runs.attempts(task.id) == []


async def test_a_cancel_made_by_another_process_stops_the_running_node_at_the_heartbeat(
    manager: TaskManager, elsewhere: TaskManager
) -> None:
    started, stopped = anyio.Event(), anyio.Event()
    flow = Workflow("held", version="1", input=Empty)

    @flow.node()
    async def wait(ctx: NodeContext[Empty]) -> int:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            stopped.set()
        return 1

    # Nothing but the heartbeat can tell this worker: the cancel is not on its change
    # feed, and its lease (60 s) and poll (60 s) are far beyond the bound below.
    settings = WorkerSettings(poll_s=60, lease_s=60, heartbeat_s=0.05, progress_interval_s=0)
    worker = Worker(manager, {flow.name: flow}, settings=settings, worker_id="w")
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        task = await submit(manager, flow)
        with anyio.fail_after(10):
            await started.wait()
        await elsewhere.cancel(task.id)
        with anyio.fail_after(10):
            await stopped.wait()

        async def run_ended() -> bool:
            return worker.active_runs == 0

        await eventually(run_ended)
        task_group.cancel_scope.cancel()

    assert (await manager.get(task.id)).state is TaskState.CANCELLED
    (attempt,) = await manager.runs.attempts(task.id)
    assert attempt.outcome is AttemptOutcome.CANCELLED
    node = (await manager.runs.checkpoints(task.id))["wait"]
    assert node.state is NodeState.FAILED
