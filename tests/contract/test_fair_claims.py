"""Claims are fair across owners (ADR 0028): one principal's backlog never starves another."""

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

import anyio
from pydantic import BaseModel

from taskloom.engine.claims import ClaimAtCreate
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import Task
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import ClaimedRun, RunStore
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


async def test_runs_reserved_for_eager_creates_count_against_the_cap(
    manager: TaskManager, store: TaskStore
) -> None:
    """A run the worker holds for an eager create in flight (ADR 0046) counts as one of
    its owner's, once, whether that create has committed (its lease is stored) or not."""
    runs = cast(RunStore, store)
    flow = _flow(anyio.Event())
    ann = [await submit(manager, flow, owner="ann") for _ in range(3)]
    bob = await submit(manager, flow, owner="bob")

    def start(task: Task) -> Task:
        return claim_start(manager.clock.now(), "started")(task)

    committed = manager.draft("job", {}, owner="ann", workflow_version="1")
    claim = ClaimAtCreate(worker="w", token="c" * 32, lease_for=_LEASE, start=start)
    assert (await runs.create_claimed(committed, claim, manager.clock.now))[1] is not None
    pending = manager.draft("job", {}, owner="ann", workflow_version="1")  # not yet stored
    claimed = await runs.claim_runs(
        worker="w",
        workflows=frozenset({"job"}),
        now=manager.clock.now(),
        lease_for=_LEASE,
        limit=10,
        start=start,
        per_owner=3,
        reserved={committed.id: "ann", pending.id: "ann", manager.draft("job", {}).id: None},
    )
    # ann holds two of her three (the committed create's lease counted once)
    assert {run.task.id for run in claimed} == {ann[0].id, bob.id}


class HeldClaims:
    """The run store; a claim made while ``go`` is set waits there once the store has
    answered (``answered`` is set), before the worker sees what it took. ``looked`` is
    set once a claim has returned."""

    def __init__(self, runs: RunStore) -> None:
        self._runs = runs
        self.go: anyio.Event | None = None
        self.answered = anyio.Event()
        self.looked = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runs, name)

    async def claim_runs(self, **terms: Any) -> Sequence[ClaimedRun]:
        claimed = await self._runs.claim_runs(**terms)
        if self.go is not None:
            self.answered.set()
            await self.go.wait()
        self.looked.set()
        return claimed


async def test_a_run_that_ends_during_a_claim_leaves_no_run_of_its_owner_waiting(
    manager: TaskManager, store: TaskStore
) -> None:
    """The claim counted the ended run's lease against its owner's cap and left one of
    the owner's runs queued: the worker looks again, not at its next poll."""
    release = anyio.Event()
    flow = _flow(release)
    runs = HeldClaims(cast(RunStore, store))
    watched = TaskManager(store, runs=cast(RunStore, runs), clock=manager.clock)
    settings = QUIET.model_copy(update={"max_runs": 4, "max_runs_per_owner": 2})
    worker = Worker(watched, {"job": flow}, settings=settings)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            await runs.looked.wait()  # found nothing: the next create starts eagerly
            busy = await submit(watched, flow, owner="ann")
            assert busy.state is TaskState.RUNNING
            runs.go = anyio.Event()  # every claim from now on (PostgreSQL's NOTIFY wakes too)
            queued = []
            for _ in range(2):  # as another process would: no wake, no eager start
                draft = watched.draft("job", {}, owner="ann", workflow_version="1")
                queued.append((await store.create(draft, draft.created_at))[0])
            worker.wake()
            await runs.answered.wait()  # it took one: ann held busy's lease and that one
            await watched.cancel(busy.id)

            async def busy_ended() -> bool:
                return worker.active_runs == 0

            await eventually(busy_ended, within_s=10)
            runs.go.set()
            release.set()
            for task in queued:
                done = await watched.wait_until_terminal(task.id)
                assert done.state is TaskState.COMPLETED
            task_group.cancel_scope.cancel()


async def test_a_run_that_ends_during_a_claim_far_below_its_owners_cap_makes_no_claim_more(
    manager: TaskManager, store: TaskStore
) -> None:
    """The claim cannot have left a run of that owner queued for its cap: the worker
    does not claim again (it would for every named run ending during a claim)."""
    release = anyio.Event()
    flow = _flow(release)
    runs = HeldClaims(cast(RunStore, store))
    claims: list[int] = []
    claim_runs = runs.claim_runs

    async def counted(**terms: Any) -> Sequence[ClaimedRun]:
        claimed = await claim_runs(**terms)
        claims.append(len(claimed))
        return claimed

    runs.claim_runs = counted  # type: ignore[method-assign]
    watched = TaskManager(store, runs=cast(RunStore, runs), clock=manager.clock)
    settings = QUIET.model_copy(update={"max_runs": 10, "max_runs_per_owner": 5})
    worker = Worker(watched, {"job": flow}, settings=settings)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            await runs.looked.wait()
            ended = await submit(watched, flow, owner="ann")
            kept = await submit(watched, flow, owner="ann")
            assert ended.state is kept.state is TaskState.RUNNING  # two of ann's five
            runs.go = anyio.Event()
            before = len(claims)
            worker.wake()
            await runs.answered.wait()
            await watched.cancel(ended.id)

            async def ended_here() -> bool:
                return worker.active_runs == 1

            await eventually(ended_here, within_s=10)
            runs.go.set()
            await eventually(lambda: _claimed_once_more(claims, before), within_s=10)
            draft = watched.draft("job", {"hold": False}, workflow_version="1")
            marker = (await store.create(draft, draft.created_at))[0]  # no wake: polls only
            worker.wake()
            assert (await watched.wait_until_terminal(marker.id)).state is TaskState.COMPLETED
            assert len(claims) == before + 2, claims[before:]  # the one of the test, and ours
            release.set()
            task_group.cancel_scope.cancel()


async def _claimed_once_more(claims: list[int], before: int) -> bool:
    return len(claims) > before
