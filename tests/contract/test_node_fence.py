"""A node's start and end behind the lease fence on every store: a stale lease or an
ended task is refused with the same error, and nothing is written (on PostgreSQL the
fence and the writes are one statement, ADR 0047)."""

from datetime import timedelta
from typing import cast

import pytest

from taskloom.engine.errors import LeaseLostError, TaskStateError
from taskloom.engine.manager import TaskManager, claim_start
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
from taskloom.testing import FakeClock

LEASE_FOR = timedelta(seconds=10)
END = NodeEnd(node="a", attempt=1, outcome=AttemptOutcome.COMPLETED, state=NodeState.COMPLETED)


async def _claimed(manager: TaskManager, store: TaskStore, clock: FakeClock) -> Lease:
    """The lease of a claimed run of a new task whose node ``a`` runs its first attempt."""
    await manager.create("job")
    (claimed,) = await cast(RunStore, store).claim_runs(
        worker="w",
        workflows=frozenset({"job"}),
        now=clock.now(),
        lease_for=LEASE_FOR,
        limit=1,
        start=claim_start(manager.clock.now()),
    )
    await cast(RunStore, store).start_node(
        claimed.lease, NodeStart(node="a", attempt=1), clock.now()
    )
    return claimed.lease


async def _written(store: TaskStore, lease: Lease) -> tuple[dict[str, NodeRun], list[NodeAttempt]]:
    runs = cast(RunStore, store)
    return await runs.checkpoints(lease.task_id), list(await runs.attempts(lease.task_id))


async def test_a_stale_token_starts_and_ends_nothing(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    lease = await _claimed(manager, store, clock)
    stale = lease.model_copy(update={"token": "not-the-token"})
    before = await _written(store, lease)
    runs = cast(RunStore, store)
    with pytest.raises(LeaseLostError, match="is gone"):
        await runs.start_node(stale, NodeStart(node="b", attempt=1), clock.now())
    with pytest.raises(LeaseLostError, match="is gone"):
        await runs.start_node(
            stale, NodeStart(node="a", attempt=2, interrupted_attempt=1), clock.now()
        )
    with pytest.raises(LeaseLostError, match="is gone"):
        await runs.end_node(stale, END, clock.now())
    assert await _written(store, lease) == before


async def test_a_released_lease_starts_and_ends_nothing(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    lease = await _claimed(manager, store, clock)
    runs = cast(RunStore, store)
    await runs.release_lease(lease)
    before = await _written(store, lease)
    with pytest.raises(LeaseLostError, match="is gone"):
        await runs.start_node(lease, NodeStart(node="b", attempt=1), clock.now())
    with pytest.raises(LeaseLostError, match="is gone"):
        await runs.end_node(lease, END, clock.now())
    assert await _written(store, lease) == before


async def test_an_ended_task_starts_no_node_but_its_running_node_may_end(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    lease = await _claimed(manager, store, clock)
    await manager.cancel(lease.task_id, reason="stop")
    before = await _written(store, lease)
    runs = cast(RunStore, store)
    with pytest.raises(TaskStateError, match="no node may start"):
        await runs.start_node(lease, NodeStart(node="b", attempt=1), clock.now())
    assert await _written(store, lease) == before
    ended = await runs.end_node(lease, END, clock.now())
    assert (ended.state, ended.attempt) == (NodeState.COMPLETED, 1)


async def test_a_node_not_running_is_refused_and_writes_nothing(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    lease = await _claimed(manager, store, clock)
    before = await _written(store, lease)
    runs = cast(RunStore, store)
    with pytest.raises(LeaseLostError, match="is not running"):
        await runs.end_node(lease, END.model_copy(update={"node": "ghost"}), clock.now())
    assert await _written(store, lease) == before
