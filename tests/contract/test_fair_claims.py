"""Claims are fair across owners (ADR 0028): one principal's backlog never starves another."""

from datetime import timedelta
from typing import cast

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from tests.helpers import eventually

QUIET = WorkerSettings(poll_s=3600, progress_interval_s=0, input_recheck_s=None)
_LEASE = timedelta(seconds=30)


class Hold(BaseModel):
    hold: bool = True


def _flow(release: anyio.Event) -> Workflow[Hold]:
    flow = Workflow("job", version="1", input=Hold)

    @flow.node()
    async def work(ctx: NodeContext[Hold]) -> str:
        if ctx.input.hold:
            await release.wait()
        return "done"

    return flow


async def test_a_hundred_long_tasks_of_one_owner_leave_room_for_anothers_short_one(
    manager: TaskManager, store: TaskStore
) -> None:
    release = anyio.Event()
    flow = _flow(release)
    worker = Worker(manager, {"job": flow}, settings=QUIET)
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        hogs = [await submit(manager, flow, owner="hog") for _ in range(100)]

        async def hogs_hold_their_share() -> bool:
            return worker.active_runs == 50

        await eventually(hogs_hold_their_share, within_s=10)
        waiting = [(await manager.get(task.id)).state for task in hogs[50:]]
        assert set(waiting) == {TaskState.QUEUED}
        short = await submit(manager, flow, {"hold": False}, owner="other")
        with anyio.fail_after(1):
            done = await manager.wait_until_terminal(short.id)
        assert done.state is TaskState.COMPLETED
        await eventually(hogs_hold_their_share)  # the short run's slot frees up again
        release.set()
        task_group.cancel_scope.cancel()


async def test_a_claim_takes_turns_between_owners_oldest_first(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = _flow(anyio.Event())
    ann = [await submit(manager, flow, owner="ann") for _ in range(3)]
    bob = [await submit(manager, flow, owner="bob") for _ in range(2)]
    claimed = await cast(RunStore, store).claim_runs(
        worker="w",
        workflows=frozenset({"job"}),
        now=manager.clock.now(),
        lease_for=_LEASE,
        limit=3,
        start=claim_start(manager.clock.now(), "started"),
    )
    assert {run.task.id for run in claimed} == {ann[0].id, bob[0].id, ann[1].id}
    capped = await cast(RunStore, store).claim_runs(
        worker="w",
        workflows=frozenset({"job"}),
        now=manager.clock.now(),
        lease_for=_LEASE,
        limit=5,
        start=claim_start(manager.clock.now(), "started"),
        per_owner=2,
    )
    assert {run.task.id for run in capped} == {bob[1].id}  # ann holds 2 already


async def test_the_local_user_is_not_capped(manager: TaskManager, store: TaskStore) -> None:
    """Tasks with no owner (stdio, the CLI, HTTP without tokens) are the only caller's:
    the per-owner cap keeps named principals from starving each other, not the user."""
    flow = _flow(anyio.Event())
    local = [await submit(manager, flow) for _ in range(4)]
    claimed = await cast(RunStore, store).claim_runs(
        worker="w",
        workflows=frozenset({"job"}),
        now=manager.clock.now(),
        lease_for=_LEASE,
        limit=10,
        start=claim_start(manager.clock.now(), "started"),
        per_owner=2,
    )
    assert {run.task.id for run in claimed} == {task.id for task in local}
