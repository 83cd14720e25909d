"""A claim chooses exactly the fair runs however deep the table is (ADR 0028), on every store.

What a claim takes is written down here, apart from any store: of the runs the test knows
to be claimable, one run at a time, the owner holding the fewest of the claiming worker's
runs goes next (ties: the owner whose oldest claimable run is oldest) and gives its
oldest claimable run; a named owner holding ``per_owner`` gives no more, the local user
(owner ``None``) is never capped. Each test builds its population through the public
API, many runs that are active but not claimable older than (and among) the claimable
ones, then compares the store's claims, run for run and in order, with that choice.

The point is a claim that does not rank every claimable run (one reading a few
candidates of each owner through an index): it must still choose these same runs. So
that a wrong claim cannot spoil the setting up, no run is leased by a claim before the
claims under test: runs another worker holds are created already claimed by it (eager
start's create, ADR 0046).
"""

from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from random import Random
from typing import Any, TypeVar

import anyio

from taskloom.engine.claims import ClaimAtCreate, new_token
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import InputRequest, Task, TaskId
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import AttemptOutcome, Lease, NodeEnd, NodeStart, NodeState
from taskloom.engine.states import TaskState
from taskloom.engine.waits import NodeWaits, Wait
from taskloom.persistence.sql.leases import MOST_OWNERS
from taskloom.testing import FakeClock

_T = TypeVar("_T")

W = "w"
"""The worker whose claims the tests check."""
LOADED: frozenset[str | tuple[str, str]] = frozenset({"job", ("vjob", "1")})
"""What W loaded: every version of ``job``, only version 1 of ``vjob``."""
LONG = timedelta(hours=1)
BRIEF = timedelta(seconds=10)
QUESTION = InputRequest(message="Go?", requested_schema={"type": "object"})
AT_ONCE = 8
"""Setting-up calls made at once (within PostgreSQL's pool of 10 connections)."""


@dataclass(frozen=True)
class Kind:
    """What a test makes a run as: its label, the task's workflow and TTL, and the
    worker that holds it from its creation (and for how long), if any."""

    label: str
    version: str | None = "1"
    name: str = "job"
    ttl_ms: int | None = None
    worker: str | None = None
    lease_for: timedelta = LONG


@dataclass(frozen=True)
class Run:
    id: TaskId
    owner: str | None
    position: int
    """Its place in the order the test created the runs (the stores' position order)."""
    kind: str
    label: str
    lease: Lease | None = None
    """The lease it was created with (``Kind.worker``'s)."""
    batch: int | None = None
    """Made with others at once (see :meth:`Population.batch`): its order among them is
    not known, only that they all come after the runs made before the batch and before
    the runs made after it."""


@dataclass
class Population:
    """The runs a test made, in creation order, and what the test knows of them: which
    are claimable by the worker it checks now, and how many runs each owner holds of
    that worker's."""

    manager: TaskManager
    made: list[Run] = field(default_factory=list)
    claimable: set[TaskId] = field(default_factory=set)
    held: Counter[str | None] = field(default_factory=Counter)
    _counts: Counter[str] = field(default_factory=Counter)
    _batches: int = 0

    async def _create(self, owner: str | None, kind: Kind) -> tuple[Task, Lease | None]:
        extra: dict[str, Any] = {} if kind.ttl_ms is None else {"ttl_ms": kind.ttl_ms}
        if kind.worker is None:
            task = await self.manager.create(
                kind.name, owner=owner, workflow_version=kind.version, **extra
            )
            return task, None
        clock = self.manager.clock

        def start(task: Task) -> Task:
            return claim_start(clock.now(), "started")(task)

        draft = self.manager.draft(kind.name, owner=owner, workflow_version=kind.version, **extra)
        claim = ClaimAtCreate(
            worker=kind.worker, token=new_token(), lease_for=kind.lease_for, start=start
        )
        stored, run = await self.manager.runs.create_claimed(draft, claim, clock.now)
        assert run is not None
        return stored, run.lease

    def _made(self, made: tuple[Task, Lease | None], kind: Kind, batch: int | None) -> Run:
        task, lease = made
        self._counts[kind.label] += 1
        owner = task.owner
        label = f"{kind.label}#{self._counts[kind.label]}/{owner or '-'}@{len(self.made)}"
        run = Run(task.id, owner, len(self.made), kind.label, label, lease, batch)
        self.made.append(run)
        return run

    async def add(self, owner: str | None, kind: Kind, *, claimable: bool = False) -> Run:
        """A new run, made after every run made so far."""
        run = self._made(await self._create(owner, kind), kind, None)
        if claimable:
            self.claimable.add(run.id)
        return run

    async def batch(
        self, runs: Sequence[tuple[str | None, Kind]], *, claimable: bool = False
    ) -> list[Run]:
        """New runs made at once (a store commits them faster so): after every run made
        so far, in an order among themselves that the test does not know, so a fair
        choice may never take one of them (:meth:`expected` checks)."""
        made: list[tuple[Task, Lease | None] | None] = [None] * len(runs)
        limiter = anyio.CapacityLimiter(AT_ONCE)

        async def make(index: int) -> None:
            async with limiter:
                made[index] = await self._create(*runs[index])

        async with anyio.create_task_group() as task_group:
            for index in range(len(runs)):
                task_group.start_soon(make, index)
        self._batches += 1
        batch = []
        for one, (_, kind) in zip(made, runs, strict=True):
            assert one is not None
            batch.append(self._made(one, kind, self._batches))
        if claimable:
            self.claimable |= {run.id for run in batch}
        return batch

    def of(self, kind: Kind) -> list[Run]:
        """The runs made as *kind*, oldest first."""
        return [run for run in self.made if run.kind == kind.label]

    def run(self, task_id: str) -> Run:
        return next(run for run in self.made if run.id == task_id)

    def labels(self, ids: Iterable[str]) -> list[str]:
        return [self.run(task_id).label for task_id in ids]

    def expected(self, limit: int, per_owner: int | None) -> list[TaskId]:
        """The fair choice of a claim of *limit*, capped at *per_owner*."""
        candidates = [run for run in self.made if run.id in self.claimable]
        chosen = fair_choice(candidates, self.held, limit, per_owner)
        # Never a run of a batch: which of them is oldest is not known. Every other
        # comparison of positions fair_choice makes is between runs the test ordered.
        unordered = [run.label for run in map(self.run, chosen) if run.batch is not None]
        assert not unordered, f"the test does not know which of its batch is oldest: {unordered}"
        return chosen

    async def claim(
        self,
        limit: int,
        per_owner: int | None = None,
        *,
        worker: str = W,
        reclaim_from: str | None = None,
        reserved: Mapping[TaskId, str | None] | None = None,
    ) -> list[TaskId]:
        """A claim by *worker*, checked against the fair choice; the test's knowledge
        updated (``held``: what each owner holds of *worker*'s)."""
        want = self.expected(limit, per_owner)
        claimed = await self.manager.claim(
            worker=worker,
            workflows=LOADED,
            lease_for=LONG,
            limit=limit,
            reclaim_from=reclaim_from,
            per_owner=per_owner,
            reserved=reserved,
        )
        got = [run.task.id for run in claimed]
        assert self.labels(got) == self.labels(want)
        assert all(run.lease.worker == worker for run in claimed)
        for task_id in got:
            self.claimable.discard(task_id)
            self.held[self.run(task_id).owner] += 1
        return got


def fair_choice(
    candidates: Sequence[Run],
    held: Mapping[str | None, int],
    limit: int,
    per_owner: int | None,
) -> list[TaskId]:
    """ADR 0028 one run at a time: *candidates* (claimable) taken while fewer than
    *limit*; the next from the owner holding the fewest (*held*, plus what this claim
    gave it), ties to the owner whose next run is oldest, which gives its oldest; a
    named owner holding *per_owner* is done."""
    queues: dict[str | None, deque[Run]] = {}
    for run in sorted(candidates, key=lambda run: run.position):
        queues.setdefault(run.owner, deque()).append(run)
    holding = Counter(held)
    chosen: list[TaskId] = []
    while len(chosen) < limit:
        open_owners = [
            owner
            for owner, queue in queues.items()
            if queue and (owner is None or per_owner is None or holding[owner] < per_owner)
        ]
        if not open_owners:
            break
        owner = min(open_owners, key=lambda owner: (holding[owner], queues[owner][0].position))
        chosen.append(queues[owner].popleft().id)
        holding[owner] += 1
    return chosen


async def each(items: Iterable[_T], act: Callable[[_T], Awaitable[object]]) -> None:
    """*act* on every item, several at once (setting up: the order does not matter)."""
    limiter = anyio.CapacityLimiter(AT_ONCE)

    async def one(item: _T) -> None:
        async with limiter:
            await act(item)

    async with anyio.create_task_group() as task_group:
        for item in items:
            task_group.start_soon(one, item)


async def wait_and_park(
    manager: TaskManager, run: Run, *, ask: bool = True, due_in: timedelta | None = None
) -> Task:
    """*run*'s nodes stop to wait, node ``a`` for an answer (*ask*) and node ``b`` for a
    timer *due_in* from now (if any), and the run is parked: its lease given back,
    claimable again once a wait is over (still ``input_required`` while its question
    waits)."""
    lease, now = run.lease, manager.clock.now()
    assert lease is not None
    waits: dict[str, NodeWaits] = {}
    if ask:
        waits["a"] = NodeWaits(Wait("input", "a#1"), question=QUESTION)
    if due_in is not None:
        waits["b"] = NodeWaits(Wait("timer", "b#nap"), due=now + due_in)
    for node in waits:
        await manager.runs.start_node(lease, NodeStart(node=node, attempt=1), now)
    for node, wait in waits.items():
        end = NodeEnd(
            node=node,
            attempt=1,
            outcome=AttemptOutcome.WAITING,
            state=NodeState.WAITING,
            waiting_for=wait.wait.encode(),
        )
        await manager.wait_node(end, wait, lease=lease)
    parked = await manager.park(run.id, [wait.wait for wait in waits.values()], lease=lease)
    assert parked.parked
    return parked


def parking(
    manager: TaskManager, *, ask: bool = True, due_in: timedelta | None = None
) -> Callable[[Run], Awaitable[Task]]:
    """:func:`wait_and_park` of a run, for :func:`each`."""

    async def park(run: Run) -> Task:
        return await wait_and_park(manager, run, ask=ask, due_in=due_in)

    return park


async def hand_back(manager: TaskManager, run: Run) -> None:
    assert run.lease is not None
    await manager.runs.release_lease(run.lease)


OWNERS = ("ann", "bob", None)
HOG = Kind("hog")
LATE = Kind("late")
QUEUED = Kind("queued")


async def test_a_deep_queue_of_one_owner_leaves_the_others_their_turns(
    manager: TaskManager, store: TaskStore
) -> None:
    """330 runs of "hog" first, then the local user's, ann's and bob's, interleaved: each
    claim takes the fair choice (turns, then position), whatever the depth; the cap
    stops the named owners and never the local user."""
    population = Population(manager)
    hogs = [await population.add("hog", HOG, claimable=True) for _ in range(10)]
    hogs += await population.batch([("hog", HOG)] * 320, claimable=True)
    for round_ in range(8):
        for owner in (None, "ann", "bob", None, "hog", "ann"):
            await population.add(owner, LATE, claimable=True)
        if round_ % 2:
            await population.add("bob", LATE, claimable=True)
    local = [run.id for run in population.made if run.owner is None]

    assert await population.claim(1, per_owner=3) == [hogs[0].id]
    second = await population.claim(3, per_owner=3)  # each other owner's first, oldest first
    assert [population.run(task_id).owner for task_id in second] == [None, "ann", "bob"]
    third = await population.claim(10, per_owner=3)
    assert [population.run(task_id).owner for task_id in third[-2:]] == [None, None]
    assert population.held == Counter({"hog": 3, "ann": 3, "bob": 3, None: 5})
    assert await population.claim(10, per_owner=3) == local[5:15]  # the local user's only
    assert await population.claim(10, per_owner=3) == local[15:]
    assert await population.claim(10, per_owner=3) == []  # every named owner holds 3

    population.held.clear()  # another worker, holding nothing, and no cap
    for limit in (1, 3, 10):
        await population.claim(limit, worker="v")
    assert population.held == Counter({"hog": 5, "ann": 5, "bob": 4})


async def test_runs_that_are_not_claimable_are_passed_over_at_any_depth(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    """54 runs of each kind that is active but not claimable (another worker's live
    lease; parked on an unanswered question, some with a timer still running too; parked
    on a timer still running; a version W has not loaded; expired), 45 of them ann's,
    come before and among the claimable ones (queued runs; parked runs whose timer is
    over, some with a question still waiting, or whose question was answered; timers and
    TTLs ending at the very moment of the claims included): every claim takes the fair
    choice of the claimable ones, and at the end nothing."""
    population = Population(manager)
    add = population.add
    leased, asking = Kind("leased", worker="other"), Kind("asking", worker="x")
    napping, unloaded = Kind("napping", worker="x"), Kind("unloaded", "2", name="vjob")
    kinds = (leased, asking, napping, unloaded)
    due, answered = Kind("due", worker="x"), Kind("answered", worker="x")
    overdue = Kind("overdue", worker="x")  # a question and a timer: the timer is over
    for block in range(6):  # five of ann's, then one of everyone's
        owners = ["ann"] * 9 if block < 5 else [OWNERS[i % 3] for i in range(9)]
        expiring = Kind("expiring", ttl_ms=2_000 if block % 2 else 1_000)  # 2 s: just now
        each_kind = (*kinds, expiring)
        await population.batch([(owner, kind) for owner in owners for kind in each_kind])
        owner = "ann" if block < 5 else OWNERS[block % 3]
        await add(owner, due, claimable=True)
        await add(owner if block % 2 else OWNERS[(block + 1) % 3], answered)
        await add(OWNERS[block % 3], QUEUED, claimable=True)
        await add("ann" if block % 2 else OWNERS[(block + 2) % 3], overdue, claimable=True)
        if block in (1, 3):
            await add(OWNERS[(block + 1) % 3], Kind("loaded", "1", name="vjob"), claimable=True)
    for i in range(14):
        await add((*OWNERS, "carol")[i % 4], QUEUED, claimable=True)

    later, soon, just_now = timedelta(hours=2), timedelta(seconds=1), timedelta(seconds=2)
    await each(population.of(asking)[::2] + population.of(answered), parking(manager))
    await each(population.of(asking)[1::2], parking(manager, due_in=later))
    await each(population.of(napping), parking(manager, ask=False, due_in=later))
    await each(population.of(due)[::2], parking(manager, ask=False, due_in=soon))
    await each(population.of(due)[1::2], parking(manager, ask=False, due_in=just_now))
    await each(population.of(overdue), parking(manager, due_in=soon))
    clock.advance(2)  # the short timers are over (some at this very moment), the TTLs too
    for run in population.of(answered):
        await manager.provide_input(run.id, "a#1", {})
        population.claimable.add(run.id)
    for owner in OWNERS:  # no version recorded: claimable by any loaded version
        await add(owner, Kind("unversioned", None), claimable=True)

    assert [len(population.of(kind)) for kind in (*kinds, Kind("expiring"))] == [54] * 5
    assert len(population.claimable) == 6 + 6 + 6 + 6 + 2 + 14 + 3
    for run in population.of(overdue):  # claimable while its question waits
        assert (await manager.get(run.id)).state is TaskState.INPUT_REQUIRED
    await population.claim(1)
    await population.claim(4, per_owner=2)
    await population.claim(10, per_owner=4)
    await population.claim(50)
    assert population.claimable == set()
    assert await population.claim(50) == []


async def test_leases_that_ended_are_claimable_at_their_own_position(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    """Behind and among 54 runs another worker holds (48 of them ann's): runs whose
    lease expired, runs handed back, and (with ``reclaim_from``) runs of a dead
    incarnation's live lease are claimed with the queued ones, each at its own
    position; the live ones never."""
    population = Population(manager)
    add = population.add
    live = Kind("live", worker="other")
    await population.batch([("ann", live)] * 45)
    lapsed = Kind("lapsed", worker="other", lease_for=BRIEF)
    dead, back = Kind("dead", worker="dead"), Kind("back", worker="other")
    for i in range(12):
        await add(OWNERS[i % 3] if i < 9 else "ann", (lapsed, dead, back)[i % 3])
        if i % 3 == 1:
            await add(OWNERS[(i + 1) % 3], QUEUED, claimable=True)
        if i % 4 == 3:
            await population.batch([(owner, live) for owner in OWNERS])
        await add("ann", (lapsed, dead, back)[(i + 1) % 3])

    await each(population.of(back), lambda run: hand_back(manager, run))
    clock.advance(BRIEF.total_seconds())  # the lapsed leases end at this very moment
    population.claimable |= {run.id for run in population.of(lapsed) + population.of(back)}

    await population.claim(1)
    await population.claim(3)
    await population.claim(5, per_owner=4)  # not the dead incarnation's: no reclaim_from
    population.claimable |= {run.id for run in population.of(dead)}
    await population.claim(4, per_owner=6, reclaim_from="dead")
    await population.claim(100, reclaim_from="dead")
    assert population.claimable == set()
    assert await population.claim(100, reclaim_from="dead") == []  # the live ones stay


async def test_an_owners_turns_start_after_the_runs_it_holds_and_has_reserved(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    """W holds live leases (and two that just expired, which count for nothing) and has runs
    reserved for eager creates (one committed and leased, one not stored yet, one whose
    lease W holds already: each counted once): each owner's turns start after what it
    holds, behind 40 of ann's runs another worker holds."""
    population = Population(manager)
    add = population.add
    await population.batch([("ann", Kind("other's", worker="other"))] * 40)
    held, lapsed = Kind("held", worker=W), Kind("lapsed", worker=W, lease_for=BRIEF)
    order = ("carol", "ann", None, "bob", "dave", "carol", "bob", "ann", None, "carol")
    for i in range(24):
        if i % 6 == 0:
            await add(OWNERS[(i // 6) % 3], held)
        if i in (3, 8):
            await add("carol", lapsed)
        await add(order[i % len(order)], QUEUED, claimable=True)
    await add("ann", held)
    committed = await add("ann", Kind("committed", worker=W))  # an eager create's
    clock.advance(BRIEF.total_seconds())  # W's lapsed leases end at this very moment
    population.claimable |= {run.id for run in population.of(lapsed)}

    pending_bob = manager.draft("job", {}, owner="bob", workflow_version="1")
    pending_local = manager.draft("job", {}, workflow_version="1")
    held_ann = population.of(held)[0]
    assert held_ann.owner == "ann"
    reserved: dict[TaskId, str | None] = {
        committed.id: "ann",
        held_ann.id: "ann",
        pending_bob.id: "bob",
        pending_local.id: None,
    }
    w_leases = {run.id: run.owner for run in [*population.of(held), committed]}
    population.held = Counter(
        owner for task_id, owner in w_leases.items() if task_id not in reserved
    ) + Counter(reserved.values())
    assert population.held == Counter({"ann": 4, "bob": 2, None: 2})

    first = await population.claim(3, per_owner=5, reserved=reserved)
    assert {population.run(task_id).owner for task_id in first} == {"carol", "dave"}
    second = await population.claim(5, per_owner=5, reserved=reserved)
    third = await population.claim(30, per_owner=5, reserved=reserved)
    assert population.held == Counter({"ann": 5, "bob": 5, "carol": 5, "dave": 2, None: 7})
    assert {run.id for run in population.of(lapsed)} <= {*first, *second, *third}
    await population.claim(30, per_owner=9, reserved=reserved)
    assert population.claimable == set()


async def test_with_many_owners_a_small_claim_takes_the_oldest_first_turns(
    manager: TaskManager, store: TaskStore
) -> None:
    """200 runs of one owner, then 80 owners' runs (two each of 20 of them, one of the
    others) and three of the local user's, in a shuffled order: a claim of 5 takes the 5
    oldest of the owners' first runs (82 owners have a first turn: more than a claim of
    5 ranks where rows are locked, 5 * 4 + 16); later claims keep to the fair choice."""
    population = Population(manager)
    hogs = [await population.add("hog", HOG, claimable=True) for _ in range(5)]
    hogs += await population.batch([("hog", HOG)] * 195, claimable=True)
    owners: list[str | None] = [f"o{n:02}" for n in range(80)]
    order = owners + owners[:20] + [None] * 3
    Random(28).shuffle(order)
    for owner in order:
        await population.add(owner, LATE, claimable=True)

    firsts: dict[str | None, Run] = {}
    for run in population.made:
        firsts.setdefault(run.owner, run)
    oldest_firsts = sorted(firsts.values(), key=lambda run: run.position)[:5]
    assert oldest_firsts[0] == hogs[0]
    assert await population.claim(5) == [run.id for run in oldest_firsts]
    await population.claim(40, per_owner=1)
    await population.claim(7, per_owner=2)
    await population.claim(200, per_owner=3)
    assert population.claimable == {run.id for run in hogs[3:]}


async def test_with_more_owners_than_are_read_one_by_one_the_choice_is_the_same(
    manager: TaskManager, store: TaskStore
) -> None:
    """Owners with a queued run below and then beyond the number from which a claim ranks
    every claimable run (``MOST_OWNERS``, ADR 0067), one run each, behind one owner's
    deep queue, and a few of the local user's: the same fair choice either way."""
    population = Population(manager)
    [await population.add("hog", HOG, claimable=True) for _ in range(3)]
    await population.batch([("hog", HOG)] * 60, claimable=True)
    order: list[str | None] = [f"p{n:03}" for n in range(MOST_OWNERS - 3)] + [None] * 3
    Random(29).shuffle(order)
    for owner in order:  # one by one: the test knows their order
        await population.add(owner, LATE, claimable=True)
    await population.claim(5, per_owner=1)  # hog and MOST_OWNERS - 3 others: read each
    for number in range(8):  # now more than MOST_OWNERS owners have a queued run
        await population.add(f"q{number}", LATE, claimable=True)
    await population.claim(6, per_owner=1)
    await population.claim(40, per_owner=2)
    await population.claim(600, per_owner=3)
    assert len({run.owner for run in population.made if run.id in population.claimable}) == 1
