"""Issue 17, item 3: history that stays (30 days by default, per workflow, per call), and
deleting finished tasks through the store port, on every store."""

from datetime import timedelta

from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager, TaskManagerSettings
from taskloom.engine.models import Task, TaskFailure
from taskloom.engine.ports import TaskStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.testing import FakeClock
from tests.contract.harness import finish, run_store, running

DAY_MS = 24 * 3_600_000
BOOM = TaskFailure(code="node_failed", message="boom")


async def test_finished_tasks_stay_30_days_by_default(
    manager: TaskManager, clock: FakeClock
) -> None:
    started = await manager.start((await manager.create("job")).id)
    failed = await manager.fail(started.id, BOOM)
    assert failed.ttl_ms == 30 * DAY_MS
    clock.advance(29 * 86_400)
    assert await manager.purge_expired() == 0
    assert (await manager.get(failed.id)).state is TaskState.FAILED


async def test_retention_by_workflow_then_by_call_under_the_cap(
    store: TaskStore, clock: FakeClock
) -> None:
    settings = TaskManagerSettings(
        workflow_ttl_ms={"audit": 90 * DAY_MS, "scratch": DAY_MS, "ledger": None},
        max_ttl_ms=365 * DAY_MS,
    )
    manager = TaskManager(store, clock=clock, settings=settings)
    assert (await manager.create("audit")).ttl_ms == 90 * DAY_MS
    assert (await manager.create("scratch")).ttl_ms == DAY_MS
    assert (await manager.create("other")).ttl_ms == 30 * DAY_MS
    assert (await manager.create("ledger")).ttl_ms == 365 * DAY_MS  # forever, capped
    assert (await manager.create("audit", ttl_ms=7 * DAY_MS)).ttl_ms == 7 * DAY_MS
    assert (await manager.create("audit", ttl_ms=900 * DAY_MS)).ttl_ms == 365 * DAY_MS


async def _ended(manager: TaskManager, state: TaskState, name: str = "job") -> Task:
    task = await manager.start((await manager.create(name)).id)
    if state is TaskState.COMPLETED:
        return await manager.complete(task.id, {"ok": True})
    if state is TaskState.FAILED:
        return await manager.fail(task.id, BOOM)
    return await manager.cancel(task.id)


async def test_delete_by_id_deletes_only_finished_tasks(
    store: TaskStore, manager: TaskManager
) -> None:
    done = await _ended(manager, TaskState.COMPLETED)
    failed = await _ended(manager, TaskState.FAILED)
    running = await manager.start((await manager.create("job")).id)
    queued = await manager.create("job")
    ids = [done.id, running.id, queued.id, "no-such-task"]
    assert await store.delete_finished(task_ids=ids, limit=10) == 1
    left = {task.id for task in (await manager.list()).tasks}
    assert left == {failed.id, running.id, queued.id}
    assert await store.delete_finished(task_ids=[], limit=10) == 0


async def test_delete_by_a_long_list_of_ids(store: TaskStore, manager: TaskManager) -> None:
    """More ids than a statement may have parameters (65,535 on PostgreSQL's wire, 32,766
    in SQLite): one call, the finished ones deleted, the store still answering."""
    done = await _ended(manager, TaskState.COMPLETED)
    queued = await manager.create("job")
    ids = [f"no-such-task-{index}" for index in range(70_000)] + [done.id, queued.id]
    assert await store.delete_finished(task_ids=ids, limit=10) == 1
    assert {task.id for task in (await manager.list()).tasks} == {queued.id}


class Empty(BaseModel):
    pass


async def test_delete_takes_the_runs_with_the_task(store: TaskStore, manager: TaskManager) -> None:
    flow = Workflow("one", version="1", input=Empty)

    @flow.node(phase="only")
    async def only(ctx: NodeContext[Empty]) -> int:
        return 1

    async with running(manager, store, flow):
        done = await finish(manager, await submit(manager, flow, {}))
    assert done.state is TaskState.COMPLETED
    assert list(await run_store(store).checkpoints(done.id)) == ["only"]
    assert await store.delete_finished(task_ids=[done.id], limit=1) == 1
    assert await run_store(store).checkpoints(done.id) == {}
    assert await run_store(store).attempts(done.id) == []


async def test_purge_by_age_and_state_in_batches(
    store: TaskStore, manager: TaskManager, clock: FakeClock
) -> None:
    old = [await _ended(manager, state) for state in TaskState if state in _ENDS]
    still_running = await manager.start((await manager.create("job")).id)
    clock.advance(10 * 86_400)
    recent = await _ended(manager, TaskState.FAILED)
    cutoff = clock.now() - timedelta(days=5)
    only_failed = frozenset({TaskState.FAILED})
    assert await store.delete_finished(finished_before=cutoff, states=only_failed, limit=10) == 1
    assert await store.delete_finished(finished_before=cutoff, limit=1) == 1
    assert await store.delete_finished(finished_before=cutoff, limit=10) == 1
    assert await store.delete_finished(finished_before=cutoff, limit=10) == 0
    left = {task.id for task in (await manager.list()).tasks}
    assert left == {still_running.id, recent.id}
    assert len(old) == 3


async def test_unfinished_states_are_never_deleted(
    store: TaskStore, manager: TaskManager, clock: FakeClock
) -> None:
    queued = await manager.create("job")
    clock.advance(86_400)
    everything = frozenset(TaskState)
    assert await store.delete_finished(states=everything, finished_before=clock.now(), limit=9) == 0
    assert (await manager.get(queued.id)).state is TaskState.QUEUED


_ENDS = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED})
