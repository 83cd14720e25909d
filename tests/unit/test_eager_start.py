"""Eager start on the in-memory store (ADR 0046): what the manager tells a reservation,
and which tasks a worker reserves a slot for."""

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.claims import ClaimAtCreate
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import IdempotencyConflictError, StoreUnavailableError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.runs import ClaimedRun, Instant, Lease, RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.testing import FakeClock, InMemoryTaskStore
from tests.helpers import eventually


class Empty(BaseModel):
    pass


class Booking:
    """A reservation that records what it was told."""

    def __init__(self) -> None:
        self.started: list[ClaimedRun] = []
        self.cancelled: list[Lease | None] = []

    @property
    def worker(self) -> str:
        return "w1"

    @property
    def lease_for(self) -> timedelta:
        return timedelta(seconds=10)

    def start(self, run: ClaimedRun) -> None:
        self.started.append(run)

    def cancel(self, lease: Lease | None) -> None:
        self.cancelled.append(lease)


class Starter:
    """Reserves every task offered to it."""

    def __init__(self) -> None:
        self.bookings: list[Booking] = []

    def reserve(self, task: Task) -> Booking:
        self.bookings.append(Booking())
        return self.bookings[-1]


class FailingStore(InMemoryTaskStore):
    """Its eager creates commit, then fail as if the answer were lost."""

    async def create_claimed(
        self, task: Task, claim: ClaimAtCreate, now: Instant
    ) -> tuple[Task, ClaimedRun | None]:
        await super().create_claimed(task, claim, now)
        raise StoreUnavailableError("the connection broke")


async def test_a_reserved_create_is_stored_claimed_and_started() -> None:
    store, starter = InMemoryTaskStore(), Starter()
    manager = TaskManager(store, clock=FakeClock())
    with manager.eager_starts(starter):
        task = await manager.create("job", {"n": 1})
    [booking] = starter.bookings
    [run] = booking.started
    assert booking.cancelled == []
    assert run.task == task == await manager.get(task.id)
    assert (task.state, task.version, run.lease.worker) == (TaskState.RUNNING, 2, "w1")
    assert run.lease.expires_at == task.created_at + timedelta(seconds=10)
    # once the block ends, nothing is offered any more
    assert (await manager.create("job", {"n": 2})).state is TaskState.QUEUED
    assert len(starter.bookings) == 1


async def test_a_held_key_frees_the_slot() -> None:
    store, starter = InMemoryTaskStore(), Starter()
    manager = TaskManager(store, clock=FakeClock())
    holder = await manager.create("job", {"n": 1}, idempotency_key="k")
    with manager.eager_starts(starter):
        again = await manager.create("job", {"n": 1}, idempotency_key="k")
        with pytest.raises(IdempotencyConflictError):
            await manager.create("job", {"n": 2}, idempotency_key="k")
    assert again == holder
    assert [(b.started, b.cancelled) for b in starter.bookings] == [([], [None])] * 2


async def test_a_failed_commit_hands_back_the_lease_it_may_have_written() -> None:
    store, starter = FailingStore(), Starter()
    manager = TaskManager(store, clock=FakeClock())
    with manager.eager_starts(starter), pytest.raises(StoreUnavailableError):
        await manager.create("job", {"n": 1})
    [booking] = starter.bookings
    [lease] = booking.cancelled
    assert booking.started == []
    assert lease is not None
    [task] = (await manager.list()).tasks
    held = await store.renew_leases(worker="w1", now=manager.clock.now, lease_for=timedelta(1))
    assert set(held) == {task.id} == {lease.task_id}
    await store.release_lease(lease)  # the token is the one the create wrote
    assert (
        await store.renew_leases(worker="w1", now=manager.clock.now, lease_for=timedelta(1)) == {}
    )


class LookingRuns:
    """The run store; ``looked`` is set once a claim has returned."""

    def __init__(self, runs: RunStore) -> None:
        self._runs = runs
        self.looked = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runs, name)

    async def claim_runs(self, **arguments: Any) -> Sequence[ClaimedRun]:
        claimed = await self._runs.claim_runs(**arguments)
        self.looked.set()
        return claimed


def _noop() -> Workflow[Empty]:
    flow = Workflow("noop", version="1", input=Empty)

    @flow.node()
    async def answer(ctx: NodeContext[Empty]) -> str:
        return "ok"

    return flow


async def test_a_worker_reserves_free_slots_while_nothing_waits() -> None:
    store, clock = InMemoryTaskStore(), FakeClock()
    runs = LookingRuns(store)
    manager = TaskManager(store, runs=cast(RunStore, runs), clock=clock)
    settings = WorkerSettings(poll_s=3600, max_runs=3, max_runs_per_owner=1)
    worker = Worker(manager, {"noop": _noop()}, settings=settings)

    def task(owner: str | None = None, name: str = "noop", version: str = "1") -> Task:
        return manager.draft(name, {}, owner=owner, workflow_version=version)

    assert worker.reserve(task()) is None  # not running
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        await runs.looked.wait()
        assert worker.reserve(task(name="other")) is None  # not loaded
        assert worker.reserve(task(version="2")) is None
        ann = worker.reserve(task("ann"))
        assert ann is not None
        assert worker.reserve(task("ann")) is None  # ann's one slot is reserved
        local = worker.reserve(task())
        assert local is not None
        assert worker.reserve(task("bob")) is not None
        assert worker.reserve(task()) is None  # three of three
        local.cancel(None)
        with pytest.raises(RuntimeError):
            local.cancel(None)
        assert worker.reserve(task()) is not None  # freed
        ann.cancel(None)
        worker.wake()  # something may wait: nothing is reserved until the worker looked
        assert worker.reserve(task("ann")) is None
        task_group.cancel_scope.cancel()
    assert worker.reserve(task("ann")) is None  # stopped


class GatedClaims(LookingRuns):
    """The run store; a claim after the first waits at ``go`` (``holding`` is set)."""

    def __init__(self, runs: RunStore) -> None:
        super().__init__(runs)
        self.claims = 0
        self.holding = anyio.Event()
        self.go = anyio.Event()

    async def claim_runs(self, **arguments: Any) -> Sequence[ClaimedRun]:
        self.claims += 1
        if self.claims > 1:
            self.holding.set()
            await self.go.wait()
        return await super().claim_runs(**arguments)


def _held(gate: anyio.Event) -> Workflow[Empty]:
    flow = Workflow("noop", version="1", input=Empty)

    @flow.node()
    async def answer(ctx: NodeContext[Empty]) -> str:
        await gate.wait()
        return "ok"

    return flow


async def test_no_eager_start_while_a_claim_may_fill_the_same_slots() -> None:
    """An idle worker's claim that finds a run nobody announced (another process queued
    it) must not share its free slot with a create in the meantime."""
    store, clock, gate = InMemoryTaskStore(), FakeClock(), anyio.Event()
    runs = GatedClaims(store)
    manager = TaskManager(store, runs=cast(RunStore, runs), clock=clock)
    settings = WorkerSettings(max_runs=1, poll_s=0.05)
    worker = Worker(manager, {"noop": _held(gate)}, settings=settings)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            await runs.looked.wait()  # found nothing: idle
            older = manager.draft("noop", {}, workflow_version="1")
            await store.create(older, older.created_at)  # as another process would: no wake
            await runs.holding.wait()  # the next poll's claim is under way
            newer = await manager.create("noop", {}, workflow_version="1")
            assert newer.state is TaskState.QUEUED  # not started: the claim may fill the slot
            runs.go.set()

            async def adopted() -> bool:
                return worker.active_runs >= 1

            await eventually(adopted, within_s=5, every_s=0.01)
            assert (await manager.get(older.id)).state is TaskState.RUNNING
            assert worker.active_runs == 1
            gate.set()
            task_group.cancel_scope.cancel()


class LimitedClaims(GatedClaims):
    """The gated run store, recording the ``limit`` each claim asked for."""

    def __init__(self, runs: RunStore) -> None:
        super().__init__(runs)
        self.limits: list[int] = []

    async def claim_runs(self, **arguments: Any) -> Sequence[ClaimedRun]:
        self.limits.append(arguments["limit"])
        return await super().claim_runs(**arguments)


class FailingSecondClaim(LimitedClaims):
    """The gated run store whose second claim fails once let go (``failed`` is set)."""

    def __init__(self, runs: RunStore) -> None:
        super().__init__(runs)
        self.failed = anyio.Event()

    async def claim_runs(self, **arguments: Any) -> Sequence[ClaimedRun]:
        claimed = await super().claim_runs(**arguments)
        if self.claims == 2:
            self.failed.set()
            raise StoreUnavailableError("the connection broke")
        return claimed


@dataclass
class Rig:
    """A worker of 4 slots on the in-memory store, whose runs hold until ``gate`` is set,
    after its first claim (which found nothing: the worker is idle)."""

    store: InMemoryTaskStore
    manager: TaskManager
    runs: LimitedClaims
    worker: Worker
    gate: anyio.Event

    async def create(self, owner: str | None = None) -> Task:
        """A task created in this process (offered to the worker for an eager start)."""
        return await self.manager.create("noop", {}, workflow_version="1", owner=owner)

    def draft(self, owner: str | None = None) -> Task:
        return self.manager.draft("noop", {}, owner=owner, workflow_version="1")

    async def queue_elsewhere(self) -> Task:
        """A run queued as another process would: nothing wakes the worker."""
        draft = self.draft()
        return (await self.store.create(draft, draft.created_at))[0]

    async def poll(self) -> None:
        """Look for work as the worker's poll does and wait for that claim to return
        (``poll_s`` is an hour, so that no poll comes at a moment of its own): no
        ``Worker.wake``, which says that work may be waiting and so switches eager start
        off. The claim must not be held (``runs.go`` set)."""
        self.runs.looked = anyio.Event()
        self.worker._wake.set()
        await self.runs.looked.wait()

    async def let_go(self) -> None:
        """Let the claim held at ``runs.go`` return, and wait until it has."""
        self.runs.looked = anyio.Event()
        self.runs.go.set()
        await self.runs.looked.wait()


@asynccontextmanager
async def _idle_worker(
    runs_type: type[LimitedClaims] = LimitedClaims, *, poll_s: float = 3600, held: bool = False
) -> AsyncIterator[Rig]:
    """A :class:`Rig`; claims after the first wait at ``runs.go`` when *held*."""
    store, gate = InMemoryTaskStore(), anyio.Event()
    runs = runs_type(store)
    if not held:
        runs.go.set()
    manager = TaskManager(store, runs=cast(RunStore, runs), clock=FakeClock())
    settings = WorkerSettings(max_runs=4, poll_s=poll_s)
    worker = Worker(manager, {"noop": _held(gate)}, settings=settings)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            await runs.looked.wait()
            yield Rig(store, manager, runs, worker, gate)
            gate.set()
            task_group.cancel_scope.cancel()


async def _full(worker: Worker) -> None:
    async def full() -> bool:
        return worker.active_runs == 4

    await eventually(full, within_s=5, every_s=0.01)


async def test_a_worker_that_creates_tasks_starts_them_eagerly_while_it_claims() -> None:
    """A poll's claim leaves half the free slots to the creates made meanwhile (ADR 0075):
    they start at once, as many as the claim did not ask for, and the claim never takes
    a slot they hold. Before, every create during a claim was queued, and the wake each
    one made started the next claim: under a steady load eager start stayed off."""
    async with _idle_worker(poll_s=0.05, held=True) as rig:
        first = await rig.create()
        assert first.state is TaskState.RUNNING  # eager: 3 slots free now
        await rig.runs.holding.wait()  # the next poll's claim is under way
        assert rig.runs.limits[-1] == 2  # of 3 free, one left out for creates
        assert rig.worker.reserve(rig.draft("ann")) is None  # the claim may fill ann's cap
        spare = await rig.create()
        assert spare.state is TaskState.RUNNING  # the slot the claim left out
        assert rig.worker.reserve(rig.draft()) is None
        late = await rig.create()
        assert late.state is TaskState.QUEUED  # the rest may be the claim's
        named = await rig.create("ann")
        rig.runs.go.set()
        await _full(rig.worker)
        states = {(await rig.manager.get(t.id)).state for t in (first, named, spare, late)}
        assert states == {TaskState.RUNNING}
        assert rig.worker.active_runs == 4  # never more than max_runs
        assert rig.worker.reserve(rig.draft()) is None


async def test_a_worker_that_creates_nothing_claims_every_free_slot() -> None:
    async with _idle_worker() as rig:
        await rig.poll()
    assert rig.runs.limits[:2] == [4, 4]


async def test_no_eager_start_after_a_claim_failed() -> None:
    """A failed claim says nothing of the queue: eager start waits for one that answers."""
    async with _idle_worker(FailingSecondClaim, poll_s=0.1, held=True) as rig:
        assert (await rig.create()).state is TaskState.RUNNING
        await rig.runs.holding.wait()  # the next poll's claim, with a slot left out
        rig.runs.go.set()
        await cast(FailingSecondClaim, rig.runs).failed.wait()
        assert rig.worker.reserve(rig.draft()) is None


async def test_a_claim_that_fills_what_it_asked_for_claims_the_rest_at_once() -> None:
    """A poll's claim that leaves a slot out and finds more runs than it asked for wakes
    the worker (ADR 0075, decision 3): the older run it left is claimed at once, not at
    the next poll, and no create starts eagerly before it."""
    async with _idle_worker() as rig:
        first = await rig.create()
        assert first.state is TaskState.RUNNING  # eager: 3 slots free, and offered
        older = [await rig.queue_elsewhere() for _ in range(3)]
        await rig.poll()  # the poll's claim: 2 of the 3 free slots
        assert rig.worker.reserve(rig.draft()) is None
        await _full(rig.worker)
        assert rig.runs.limits[1:3] == [2, 1]  # the rest at once, with eager start off
        assert {(await rig.manager.get(t.id)).state for t in older} == {TaskState.RUNNING}


async def test_a_create_during_a_polls_claim_may_take_the_slot_an_older_run_waits_for() -> None:
    """What ADR 0075 gives up: a create made during a poll's claim takes the slot the
    claim left out, although the claim finds more older runs than it asked for; the
    one it left waits for a slot to free up (a run's end), not for one more claim."""
    async with _idle_worker(held=True) as rig:
        first = await rig.create()
        assert first.state is TaskState.RUNNING
        rig.worker._wake.set()  # a poll
        await rig.runs.holding.wait()  # the poll's claim, one slot left out
        older = [await rig.queue_elsewhere() for _ in range(3)]
        newer = await rig.create()
        assert newer.state is TaskState.RUNNING  # ahead of the three older runs
        await rig.let_go()
        assert rig.worker.active_runs == 4
        states = [(await rig.manager.get(t.id)).state for t in older]
        assert states == [TaskState.RUNNING, TaskState.RUNNING, TaskState.QUEUED]
        rig.gate.set()  # runs end: the older run left is claimed first

        async def claimed() -> bool:
            return (await rig.manager.get(older[2].id)).state is not TaskState.QUEUED

        await eventually(claimed, within_s=5, every_s=0.01)


async def test_a_wake_makes_the_claim_take_every_free_slot() -> None:
    """A wake says work may be waiting: the claim it starts takes every free slot even for
    a worker that creates tasks, and no create starts eagerly while it is under way."""
    async with _idle_worker(held=True) as rig:
        first = await rig.create()
        assert first.state is TaskState.RUNNING  # offered a task: it creates tasks
        older = await rig.queue_elsewhere()
        rig.worker.wake()  # as the announcement of another process's run does
        await rig.runs.holding.wait()
        assert rig.runs.limits[-1] == 3
        newer = await rig.create()
        assert newer.state is TaskState.QUEUED  # the older run goes first
        await rig.let_go()
        states = {(await rig.manager.get(t.id)).state for t in (older, newer)}
        assert states == {TaskState.RUNNING}


async def test_a_worker_that_stopped_creating_claims_every_free_slot_again() -> None:
    """Only a create since its last claim makes a worker leave slots out of a claim."""
    async with _idle_worker() as rig:
        assert (await rig.create()).state is TaskState.RUNNING
        await rig.poll()  # a poll after the create
        await rig.poll()  # then one with none since
        assert rig.runs.limits == [4, 2, 3]


async def test_a_worker_offered_only_named_owners_tasks_claims_every_free_slot() -> None:
    """A named owner's create never starts during a claim (the claim may fill its cap):
    a worker whose creates are all of named owners (HTTP with tokens) leaves no slot
    out of a claim for them, which would only delay the older runs the claim finds."""
    async with _idle_worker() as rig:
        assert (await rig.create("ann")).state is TaskState.RUNNING
        await rig.poll()
        assert rig.runs.limits == [4, 3]
