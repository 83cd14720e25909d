"""A node's end on SQLite is committed once ``end_node`` is called, whether or not its
caller still waits (ADR 0056): the runner awaits such an end without a shielded scope,
so a worker stopped while an end is in flight leaves that end written all the same."""

from datetime import timedelta
from pathlib import Path

import anyio

from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.runs import (
    AttemptOutcome,
    NodeEnd,
    NodeStart,
    NodeState,
    ends_queued,
)
from taskloom.persistence.memory import InMemoryTaskStore
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.testing import FakeClock


async def test_an_end_whose_caller_is_cancelled_is_committed(tmp_path: Path) -> None:
    clock = FakeClock()
    async with SqliteTaskStore.open(tmp_path / "ends.db") as store:
        manager = TaskManager(store, runs=store, clock=clock)
        task = await manager.create("job")
        (claimed,) = await store.claim_runs(
            worker="w",
            workflows=frozenset({"job"}),
            now=clock.now(),
            lease_for=timedelta(seconds=10),
            limit=1,
            start=claim_start(clock.now()),
        )
        lease = claimed.lease
        await store.start_node(lease, NodeStart(node="a", attempt=1), clock.now())
        end = NodeEnd(
            node="a",
            attempt=1,
            outcome=AttemptOutcome.COMPLETED,
            state=NodeState.COMPLETED,
            output=7,
        )
        with anyio.fail_after(10):
            with anyio.CancelScope() as scope:
                scope.cancel()  # delivered at the first wait: the end is queued by then
                await store.end_node(lease, end, clock.now())
            assert scope.cancelled_caught  # the caller never saw the commit
            await store.writer.submit(lambda raw: None)  # committed after the end
        checkpoints = await store.checkpoints(task.id)
        attempts = await store.attempts(task.id)
    assert checkpoints["a"].state is NodeState.COMPLETED
    assert checkpoints["a"].output == 7
    assert [attempt.outcome for attempt in attempts] == [AttemptOutcome.COMPLETED]


def test_only_the_store_that_queues_its_ends_says_so() -> None:
    assert ends_queued(SqliteTaskStore) is True
    assert ends_queued(InMemoryTaskStore()) is False  # its ends are shielded by the runner
