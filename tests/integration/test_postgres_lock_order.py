"""Lease renewals lock their rows in task id order, the order claims take leases in.

A renewal that locked in heap order could hold a later lease while waiting for an
earlier one that a claim held, while the claim waited for the later one: a deadlock,
seen in the chaos test. Here another transaction locks the first lease (as a claim
taking over leases in order would) and the renewal waits behind it; it must be holding
nothing else, so the second lease can still be locked without waiting. The second
lease's row is placed before the first in the heap, so a renewal in heap order fails.
"""

from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
import psycopg
import pytest
from psycopg import sql

from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import Task, TaskId
from taskloom.persistence.postgres import PostgresTaskStore
from taskloom.testing import FakeClock
from tests import postgres
from tests.helpers import eventually


@pytest.fixture
async def store() -> AsyncIterator[PostgresTaskStore]:
    async with postgres.fresh_store() as opened:
        yield opened


async def test_a_renewal_waiting_for_one_lease_holds_none_after_it(
    store: PostgresTaskStore,
) -> None:
    clock = FakeClock()
    manager = TaskManager(store, clock=clock)
    for _ in range(2):
        await manager.create("job")
    claimed = await store.claim_runs(
        worker="w",
        workflows=frozenset({"job"}),
        now=clock.now(),
        lease_for=timedelta(seconds=30),
        limit=2,
        start=claim_start(manager.clock.now()),
    )
    first, second = sorted(run.task.id for run in claimed)
    schema = store.settings.schema_name
    leases = sql.Identifier(schema, "leases")

    async with (
        await psycopg.AsyncConnection.connect(postgres.TEST_URL, autocommit=True) as other,
        await psycopg.AsyncConnection.connect(postgres.TEST_URL, autocommit=True) as watcher,
    ):
        # The first lease's row moves after the second's in the heap (and in the worker
        # index, whose equal keys are in heap order).
        await other.execute(
            sql.SQL(
                "WITH gone AS (DELETE FROM {} WHERE task_id = %s RETURNING *)"
                " INSERT INTO {} SELECT * FROM gone"
            ).format(leases, leases),
            (first,),
        )
        await other.execute("BEGIN")
        await other.execute(
            sql.SQL("SELECT 1 FROM {} WHERE task_id = %s FOR UPDATE").format(leases), (first,)
        )
        holder = other.info.backend_pid
        renewed: dict[TaskId, Task | None] = {}

        async def renew() -> None:
            renewed.update(
                await store.renew_leases(
                    worker="w", now=clock.now(), lease_for=timedelta(seconds=60)
                )
            )

        async def renewal_waits() -> bool:
            cursor = await watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (holder,),
            )
            found = await cursor.fetchone()
            return found is not None and found[0] > 0

        with anyio.fail_after(20):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(renew)
                await eventually(renewal_waits)
                try:  # a renewal in heap order holds the second lease by now
                    await other.execute(
                        sql.SQL("SELECT 1 FROM {} WHERE task_id = %s FOR UPDATE NOWAIT").format(
                            leases
                        ),
                        (second,),
                    )
                finally:
                    await other.execute("ROLLBACK")  # lets the renewal finish
    assert sorted(renewed) == [first, second]
