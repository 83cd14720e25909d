"""Eager start (ADR 0046): a task created while this process's worker has a free slot is
claimed by its own create and runs at once; otherwise it is queued as before."""

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.claims import ClaimAtCreate
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import StoreUnavailableError
from taskloom.engine.history import Cause
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import Task
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import AttemptOutcome, ClaimedRun, Instant, Lease, NodeStart, RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from tests.helpers import eventually

QUIET = WorkerSettings(poll_s=3600, progress_interval_s=0, input_recheck_s=None)
"""No polling: every claim is one the worker chose to make."""
_LEASE = timedelta(seconds=30)


class Hold(BaseModel):
    hold: bool = False


def _flow(
    release: anyio.Event, version: str = "1", started: list[str] | None = None
) -> Workflow[Hold]:
    flow = Workflow("job", version=version, input=Hold)

    @flow.node()
    async def work(ctx: NodeContext[Hold]) -> str:
        if started is not None:
            started.append(ctx.task_id)
        if ctx.input.hold:
            await release.wait()
        return "done"

    return flow


class WatchedRuns:
    """The store's run side, counting claims and eager creates. ``gate``, when set, holds
    each claim until it opens; ``fail`` makes the next eager create fail, before or after
    its commit."""

    def __init__(self, runs: RunStore) -> None:
        self._runs = runs
        self.claims = 0
        self.eager: list[str] = []
        self.looked = anyio.Event()
        """A claim has returned."""
        self.gate: anyio.Event | None = None
        self.waiting = anyio.Event()
        """A claim waits at the gate."""
        self.fail: str | None = None
        self.released: list[Lease] = []
        self.log: list[str] = []
        """``release``, and ``claim N`` for a claim that took N runs, in order."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runs, name)

    async def claim_runs(self, **arguments: Any) -> Sequence[ClaimedRun]:
        if self.gate is not None:
            self.waiting.set()
            await self.gate.wait()
        claimed = await self._runs.claim_runs(**arguments)
        self.claims += 1
        self.log.append(f"claim {len(claimed)}")
        self.looked.set()
        return claimed

    async def create_claimed(
        self, task: Task, claim: ClaimAtCreate, now: Instant
    ) -> tuple[Task, ClaimedRun | None]:
        if self.fail == "before":
            self.fail = None
            raise StoreUnavailableError("the database is down")
        stored, run = await self._runs.create_claimed(task, claim, now)
        if self.fail == "after":  # committed, but the answer is lost
            self.fail = None
            raise StoreUnavailableError("the connection broke")
        if run is not None:
            self.eager.append(task.id)
        return stored, run

    async def release_lease(self, lease: Lease) -> None:
        await self._runs.release_lease(lease)
        self.released.append(lease)
        self.log.append("release")


def _watched(
    manager: TaskManager, store: TaskStore, flow: Workflow[Hold], **settings: Any
) -> tuple[Worker, WatchedRuns]:
    """A worker over a manager whose run store is watched (use ``worker.manager``)."""
    runs = WatchedRuns(cast(RunStore, store))
    watched = TaskManager(store, runs=cast(RunStore, runs), clock=manager.clock)
    worker = Worker(watched, {flow.name: flow}, settings=QUIET.model_copy(update=settings))
    return worker, runs


async def _causes(manager: TaskManager, task: Task) -> list[tuple[int, TaskState, Cause]]:
    _, entries = await manager.history(task.id)
    return [(entry.version, entry.state, entry.cause) for entry in entries]


async def test_a_task_created_while_the_worker_is_idle_runs_without_a_claim(
    manager: TaskManager, store: TaskStore
) -> None:
    worker, runs = _watched(manager, store, _flow(anyio.Event()), max_runs=4)
    manager = worker.manager
    flow = cast(Workflow[Hold], worker.workflows["job"])
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        await runs.looked.wait()  # its first claim found nothing
        task = await submit(manager, flow)
        assert task.state is TaskState.RUNNING
        assert (task.version, task.status_message) == (2, "started")
        with anyio.fail_after(20):
            done = await manager.wait_until_terminal(task.id)
        task_group.cancel_scope.cancel()
    assert done.state is TaskState.COMPLETED
    assert runs.eager == [task.id]
    assert runs.claims == 1  # the first one only: no claim transaction for the run
    assert await _causes(manager, done) == [
        (1, TaskState.QUEUED, Cause.CREATED),
        (2, TaskState.RUNNING, Cause.CLAIMED),
        (3, TaskState.COMPLETED, Cause.COMPLETED),
    ]
    attempts = await runs.attempts(task.id)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, AttemptOutcome.COMPLETED)]


async def test_the_create_writes_what_a_claim_writes(
    manager: TaskManager, store: TaskStore
) -> None:
    runs = cast(RunStore, store)

    def start(task: Task) -> Task:
        return claim_start(manager.clock.now(), "started")(task)

    queued = await manager.create("job", {"n": 1})
    [by_claim] = await runs.claim_runs(
        worker="w1", workflows=frozenset({"job"}), now=manager.clock.now, lease_for=_LEASE,
        limit=1, start=start,
    )  # fmt: skip
    draft = manager.draft("job", {"n": 1})
    claim = ClaimAtCreate(worker="w1", token="a" * 32, lease_for=_LEASE, start=start)
    stored, run = await runs.create_claimed(draft, claim, manager.clock.now)

    assert run is not None
    assert stored == run.task == await manager.get(draft.id)
    assert (run.nodes, run.resumed) == ({}, False)
    assert run.lease == Lease(
        task_id=draft.id, worker="w1", token="a" * 32, expires_at=manager.clock.now() + _LEASE
    )
    same = {"id", "created_at", "updated_at"}
    assert stored.model_dump(exclude=same) == by_claim.task.model_dump(exclude=same)
    assert await _causes(manager, stored) == await _causes(manager, queued)
    assert await _causes(manager, stored) == [
        (1, TaskState.QUEUED, Cause.CREATED),
        (2, TaskState.RUNNING, Cause.CLAIMED),
    ]
    # the lease is the task's: held against other workers, renewed, and a fence that holds
    others = await runs.claim_runs(
        worker="w2", workflows=frozenset({"job"}), now=manager.clock.now, lease_for=_LEASE,
        limit=10, start=start,
    )  # fmt: skip
    assert others == []
    renewed = await runs.renew_leases(worker="w1", now=manager.clock.now, lease_for=_LEASE)
    assert set(renewed) == {queued.id, draft.id}
    node = await runs.start_node(run.lease, NodeStart(node="work", attempt=1), manager.clock.now())
    assert node.attempt == 1


async def test_a_held_key_writes_nothing(manager: TaskManager, store: TaskStore) -> None:
    runs = cast(RunStore, store)
    holder = await manager.create("job", {"n": 1}, owner="ann", idempotency_key="k")
    draft = manager.draft("job", {"n": 2}, owner="ann", idempotency_key="k")
    claim = ClaimAtCreate(
        worker="w1",
        token="b" * 32,
        lease_for=_LEASE,
        start=lambda task: claim_start(manager.clock.now(), "started")(task),
    )
    stored, run = await runs.create_claimed(draft, claim, manager.clock.now)
    assert (stored, run) == (holder, None)
    assert await _causes(manager, holder) == [(1, TaskState.QUEUED, Cause.CREATED)]
    assert await runs.renew_leases(worker="w1", now=manager.clock.now, lease_for=_LEASE) == {}
    assert list((await manager.list()).tasks) == [holder]


async def test_an_older_run_waiting_for_a_slot_is_not_overtaken(
    manager: TaskManager, store: TaskStore
) -> None:
    release = anyio.Event()
    started: list[str] = []
    worker, runs = _watched(manager, store, _flow(release, started=started), max_runs=1)
    manager = worker.manager
    flow = cast(Workflow[Hold], worker.workflows["job"])
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        await runs.looked.wait()
        first = await submit(manager, flow, {"hold": True})  # takes the only slot, eagerly
        older = await submit(manager, flow)  # no free slot: queued
        assert (first.state, older.state) == (TaskState.RUNNING, TaskState.QUEUED)
        runs.gate = anyio.Event()
        release.set()  # the slot frees up; the worker wakes and claims (held at the gate)
        with anyio.fail_after(20):
            await runs.waiting.wait()
            newer = await submit(manager, flow)  # a free slot, but an older run waits
            assert newer.state is TaskState.QUEUED
            runs.gate.set()
            for task in (older, newer):
                await manager.wait_until_terminal(task.id)
        task_group.cancel_scope.cancel()
    assert runs.eager == [first.id]
    assert started == [first.id, older.id, newer.id]


@pytest.mark.parametrize("refusal", ["slots", "owner", "version", "setting"])
async def test_a_task_that_may_not_start_eagerly_is_queued(
    manager: TaskManager, store: TaskStore, refusal: str
) -> None:
    release = anyio.Event()
    settings: dict[str, Any] = {"max_runs": 4, "max_runs_per_owner": 1}
    if refusal == "slots":
        settings["max_runs"] = 1
    if refusal == "setting":
        settings["eager_start"] = False
    worker, runs = _watched(manager, store, _flow(release), **settings)
    manager = worker.manager
    flow = cast(Workflow[Hold], worker.workflows["job"])
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        await runs.looked.wait()
        if refusal in ("slots", "owner"):  # the only slot, or all of ann's
            busy = await submit(manager, flow, {"hold": True}, owner="ann")
            assert busy.state is TaskState.RUNNING
        other = _flow(release, version="2") if refusal == "version" else flow
        seen = len(runs.log)
        task = await submit(manager, other, owner="ann" if refusal == "owner" else None)
        assert (task.state, task.version) == (TaskState.QUEUED, 1)
        if refusal == "owner":  # once the worker looked, ann's cap holds no one else back

            async def looked_again() -> bool:
                return runs.log[seen:] == ["claim 0"]

            await eventually(looked_again)
            bob = await submit(manager, flow, owner="bob")
            assert bob.state is TaskState.RUNNING
        release.set()
        if refusal == "version":  # no process runs version 2: it waits
            assert (await manager.get(task.id)).state is TaskState.QUEUED
        else:
            with anyio.fail_after(20):
                done = await manager.wait_until_terminal(task.id)
            assert done.state is TaskState.COMPLETED
        task_group.cancel_scope.cancel()
    assert task.id not in runs.eager


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_failed_commit_frees_the_slot_and_hands_the_lease_back(
    manager: TaskManager, store: TaskStore, when: str
) -> None:
    # the lease goes back at the next heartbeat or poll, and the run with it
    often = {"heartbeat_s": 0.05, "poll_s": 0.05}
    worker, runs = _watched(manager, store, _flow(anyio.Event()), max_runs=1, **often)
    manager = worker.manager
    flow = cast(Workflow[Hold], worker.workflows["job"])
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        await runs.looked.wait()
        runs.fail = when
        with pytest.raises(StoreUnavailableError):
            await submit(manager, flow)
        [task] = (await manager.list()).tasks if when == "after" else [None]

        async def handed_back() -> bool:  # by a heartbeat or a claim, or both at once
            return bool(runs.released)

        await eventually(handed_back)
        [lease] = set(runs.released)
        assert lease.worker == worker.worker_id
        if task is not None:  # it landed: the worker takes it back from the queue
            assert lease.task_id == task.id
            with anyio.fail_after(20):
                done = await manager.wait_until_terminal(task.id)
            assert done.state is TaskState.COMPLETED

        async def idle() -> bool:  # the claim after the hand-back (and the run) found no more
            after = runs.log[runs.log.index("release") :]
            return not worker.active_runs and after[-1] == "claim 0"

        await eventually(idle)
        again = await submit(manager, flow)  # the slot is free again: eager
        assert again.state is TaskState.RUNNING
        with anyio.fail_after(20):
            await manager.wait_until_terminal(again.id)
        task_group.cancel_scope.cancel()
    assert runs.eager == [again.id]


class HeldCommit:
    """Stands in for ``create_claimed`` of a run store: a create that gets to its commit
    sets ``committing`` and commits (through the store's own ``create_claimed``, kept as
    ``commit``) once ``go_on`` is set."""

    def __init__(self, runs: Any) -> None:
        self.committing, self.go_on = anyio.Event(), anyio.Event()
        self.commit = runs.create_claimed

    async def __call__(self, task: Task, claim: ClaimAtCreate, now: Instant) -> Any:
        self.committing.set()
        await self.go_on.wait()
        return await self.commit(task, claim, now)


async def test_a_caller_cancelled_during_the_commit_leaves_the_run_running(
    manager: TaskManager, store: TaskStore
) -> None:
    worker, runs = _watched(manager, store, _flow(anyio.Event()), max_runs=2)
    manager = worker.manager
    flow = cast(Workflow[Hold], worker.workflows["job"])
    hold = HeldCommit(runs)
    runs.create_claimed = hold  # type: ignore[method-assign]
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        await runs.looked.wait()
        with anyio.CancelScope() as caller:
            task_group.start_soon(_cancel_when, hold, caller)
            await submit(manager, flow)
            await anyio.sleep_forever()
        assert caller.cancelled_caught
        [task] = (await manager.list()).tasks
        with anyio.fail_after(20):
            done = await manager.wait_until_terminal(task.id)
        task_group.cancel_scope.cancel()
    assert done.state is TaskState.COMPLETED
    assert runs.eager == [task.id]
    assert runs.claims == 1


async def _cancel_when(hold: HeldCommit, caller: anyio.CancelScope) -> None:
    await hold.committing.wait()
    caller.cancel()
    await anyio.lowlevel.checkpoint()
    hold.go_on.set()


@pytest.mark.parametrize("held", ["owner", "slots"])
async def test_a_claim_counts_the_slots_of_eager_creates_in_flight(
    manager: TaskManager, store: TaskStore, held: str
) -> None:
    """A claim made while an eager create is committing counts that create's slot as
    taken, both against the owner's cap (``owner``: ann holds one run and one create in
    flight, her cap is two) and against ``max_runs`` (``slots``: one run and one create in
    flight, three slots): the worker never runs more than either allows."""
    release = anyio.Event()
    owner: str | None = "ann"
    settings: dict[str, Any] = {"max_runs": 4, "max_runs_per_owner": 2}
    if held == "slots":
        owner, settings = None, {"max_runs": 3}  # the local user is not capped
    worker, runs = _watched(manager, store, _flow(release), **settings)
    manager = worker.manager
    flow = cast(Workflow[Hold], worker.workflows["job"])
    hold = HeldCommit(runs)

    in_flight: list[Task] = []
    created = anyio.Event()

    async def create_in_flight() -> None:
        in_flight.append(await submit(manager, flow, {"hold": True}, owner=owner))
        created.set()

    with anyio.fail_after(20):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            await runs.looked.wait()
            busy = await submit(manager, flow, {"hold": True}, owner=owner)
            assert busy.state is TaskState.RUNNING  # eager: one slot taken
            runs.create_claimed = hold  # type: ignore[method-assign]
            task_group.start_soon(create_in_flight)
            await hold.committing.wait()  # a second slot reserved, its create committing
            queued = []
            for _ in range(2):  # as another process would: no wake, no reservation
                draft = manager.draft("job", {"hold": True}, owner=owner, workflow_version="1")
                queued.append((await store.create(draft, draft.created_at))[0])
            runs.looked = anyio.Event()
            worker.wake()
            await runs.looked.wait()  # the claim made while the create commits
            hold.go_on.set()
            await created.wait()
            [eager] = in_flight
            assert eager.state is TaskState.RUNNING
            states = [(await manager.get(task.id)).state for task in queued]
            # the owner's cap (2) holds; the third slot of three goes to one queued run
            cap = 0 if held == "owner" else 1
            assert states.count(TaskState.RUNNING) == cap, states
            assert worker.active_runs == 2 + cap
            release.set()
            for task in (busy, eager, *queued):
                done = await manager.wait_until_terminal(task.id)
                assert done.state is TaskState.COMPLETED
            task_group.cancel_scope.cancel()


async def test_no_eager_start_of_an_owner_while_a_claim_may_fill_its_cap(
    manager: TaskManager, store: TaskStore
) -> None:
    """The reverse: a create made while a claim is in flight does not start eagerly, so it
    cannot take a slot of its owner's cap that the claim is filling."""
    release = anyio.Event()
    worker, runs = _watched(manager, store, _flow(release), max_runs=4, max_runs_per_owner=2)
    manager = worker.manager
    flow = cast(Workflow[Hold], worker.workflows["job"])
    with anyio.fail_after(20):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            await runs.looked.wait()
            busy = await submit(manager, flow, {"hold": True}, owner="ann")
            assert busy.state is TaskState.RUNNING  # eager: one of ann's two
            draft = manager.draft("job", {"hold": True}, owner="ann", workflow_version="1")
            older = (await store.create(draft, draft.created_at))[0]  # another process's
            runs.gate, runs.looked = anyio.Event(), anyio.Event()
            worker.wake()
            await runs.waiting.wait()  # the claim that takes ann's second slot is under way
            newer = await submit(manager, flow, {"hold": True}, owner="ann")
            assert newer.state is TaskState.QUEUED
            runs.gate.set()
            await runs.looked.wait()
            assert (await manager.get(older.id)).state is TaskState.RUNNING
            assert (await manager.get(newer.id)).state is TaskState.QUEUED
            assert worker.active_runs == 2
            release.set()
            for task in (busy, older, newer):
                done = await manager.wait_until_terminal(task.id)
                assert done.state is TaskState.COMPLETED
            task_group.cancel_scope.cancel()
    assert runs.eager == [busy.id]


async def test_a_reservation_an_idempotent_replay_gives_back_wakes_the_owners_waiting_run(
    manager: TaskManager, store: TaskStore
) -> None:
    """A claim counts the slot held for an eager create in flight against its owner's
    cap; when that create turns out to be a replay of an idempotency key (nothing is
    created, the slot is given back), a run of the owner that the claim left queued for
    it is claimed at once, not at the next poll (an hour here)."""
    release = anyio.Event()
    worker, runs = _watched(manager, store, _flow(release), max_runs=4, max_runs_per_owner=2)
    manager = worker.manager
    flow = cast(Workflow[Hold], worker.workflows["job"])
    hold = HeldCommit(runs)

    async def replay() -> None:
        again = await submit(manager, flow, {}, owner="ann", idempotency_key="k")
        assert again.id == first.id

    async def no_runs() -> bool:
        return not worker.active_runs

    with anyio.fail_after(20):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            await runs.looked.wait()
            first = await submit(manager, flow, {}, owner="ann", idempotency_key="k")
            await manager.wait_until_terminal(first.id)  # ran eagerly, ended: still idle
            # and gone from the worker (it leaves after its end is published; leaving
            # with busy's slot reserved, ann's two, it would wake the worker: not idle)
            await eventually(no_runs)
            busy = await submit(manager, flow, {"hold": True}, owner="ann")
            assert busy.state is TaskState.RUNNING  # one of ann's two
            runs.create_claimed = hold  # type: ignore[method-assign]
            task_group.start_soon(replay)
            await hold.committing.wait()  # ann's second slot reserved for the replay
            draft = manager.draft("job", {}, owner="ann", workflow_version="1")
            queued = (await store.create(draft, draft.created_at))[0]  # another process's
            runs.looked = anyio.Event()
            worker.wake()
            await runs.looked.wait()  # ann is at her cap: the queued run is left
            assert (await manager.get(queued.id)).state is TaskState.QUEUED
            hold.go_on.set()  # the replay creates nothing and gives its slot back
            done = await manager.wait_until_terminal(queued.id)
            assert done.state is TaskState.COMPLETED
            release.set()
            await manager.wait_until_terminal(busy.id)
            task_group.cancel_scope.cancel()


async def test_a_local_create_during_a_polls_claim_takes_only_a_slot_it_left_out(
    manager: TaskManager, store: TaskStore
) -> None:
    """ADR 0075 on each store: a poll's claim of an idle worker that creates tasks asks
    for 2 of its 3 free slots; a create of the local user committing while the claim is
    under way takes the third, the next create is queued, and the worker never runs more
    than ``max_runs`` although more older runs wait than the claim asked for."""
    release = anyio.Event()
    worker, runs = _watched(manager, store, _flow(release), max_runs=4)
    manager = worker.manager
    flow = cast(Workflow[Hold], worker.workflows["job"])
    created = anyio.Event()
    hold = HeldCommit(runs)

    in_flight: list[Task] = []

    async def create_in_flight() -> None:
        in_flight.append(await submit(manager, flow, {"hold": True}))
        created.set()

    with anyio.fail_after(20):
        async with anyio.create_task_group() as task_group:
            try:  # a failure must not leave the shielded commit waiting
                await task_group.start(worker.run)
                await runs.looked.wait()  # found nothing: idle
                busy = await submit(manager, flow, {"hold": True})
                assert busy.state is TaskState.RUNNING  # eager: 3 slots free
                older = []
                for _ in range(3):  # as another process would: no wake
                    draft = manager.draft("job", {"hold": True}, workflow_version="1")
                    older.append((await store.create(draft, draft.created_at))[0])
                runs.gate, runs.looked = anyio.Event(), anyio.Event()
                worker._wake.set()  # the poll (no wake: nothing announced work)
                await runs.waiting.wait()  # the poll's claim, for 2 of the 3 free slots
                runs.create_claimed = hold  # type: ignore[method-assign]
                task_group.start_soon(create_in_flight)
                await hold.committing.wait()  # the third slot reserved, its create committing
                runs.create_claimed = hold.commit  # type: ignore[method-assign]
                late = await submit(manager, flow, {"hold": True})
                assert late.state is TaskState.QUEUED  # every free slot is taken or asked for
                runs.gate.set()
                hold.go_on.set()  # the claim and the create commit together
                await created.wait()
                await runs.looked.wait()
                [eager] = in_flight
                assert eager.state is TaskState.RUNNING
                states = [(await manager.get(task.id)).state for task in (*older, late)]
                assert states.count(TaskState.RUNNING) == 2, states
                assert worker.active_runs == 4
                release.set()
                for task in (busy, eager, *older, late):
                    done = await manager.wait_until_terminal(task.id)
                    assert done.state is TaskState.COMPLETED
                task_group.cancel_scope.cancel()
            finally:
                hold.go_on.set()
    assert runs.eager == [busy.id, eager.id]
