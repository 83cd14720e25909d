"""A claim that ranked a running run without a lease or a checkpoint (handed back before
its first node) reads its checkpoints all the same (ADR 0063): another worker may claim
it after the ranking's snapshot (without a write of the task's row), run a node and hand
it back before this claim takes it. Found in review; the ranking is held after its
snapshot by an advisory lock that the test lets go."""

from datetime import timedelta
from typing import Any

import anyio
import psycopg
import pytest

from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.runs import AttemptOutcome, ClaimedRun, NodeEnd, NodeStart, NodeState
from taskloom.engine.states import TaskState
from taskloom.persistence.postgres import PostgresTaskStore
from taskloom.testing import FakeClock
from tests import postgres
from tests.helpers import eventually

_GATE = "(SELECT count(*) FROM (SELECT pg_advisory_xact_lock_shared(4242)) g) = 1 AND "
_WHERE = "ON h.who = r.who  WHERE "


async def _claim(store: PostgresTaskStore, clock: FakeClock, worker: str) -> list[ClaimedRun]:
    return list(
        await store.claim_runs(
            worker=worker,
            workflows=frozenset({"job"}),
            now=clock.now(),
            lease_for=timedelta(seconds=60),
            limit=10,
            start=claim_start(clock.now()),
        )
    )


@pytest.mark.parametrize("ended", [True, False])
async def test_a_run_claimed_and_handed_back_during_a_ranking_keeps_its_checkpoint(
    monkeypatch: pytest.MonkeyPatch, ended: bool
) -> None:
    clock = FakeClock()
    async with postgres.fresh_store(retry_s=30, min_connections=2, max_connections=4) as store:
        manager = TaskManager(store, clock=clock)
        task = await manager.create("job")
        (first,) = await _claim(store, clock, "w0")
        await store.release_lease(first.lease)  # handed back before any node: RUNNING
        stored = await store.get(task.id, clock.now())
        assert stored is not None
        assert stored.state is TaskState.RUNNING
        version = stored.version

        execute = psycopg.AsyncConnection.execute

        async def gated(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            # w2's ranking waits, after its snapshot and before it locks any task row
            if isinstance(query, str) and "picked AS (" in query and params["worker"] == "w2":
                query = query.replace(_WHERE, _WHERE + _GATE, 1)
            return await execute(self, query, params, **kw)

        monkeypatch.setattr(psycopg.AsyncConnection, "execute", gated)
        async with await psycopg.AsyncConnection.connect(
            postgres.TEST_URL, autocommit=True
        ) as admin:
            await admin.execute("SELECT pg_advisory_lock(4242)")

            async def gate_waits() -> bool:
                cursor = await admin.execute(
                    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    " AND objid = 4242"
                )
                return await cursor.fetchone() is not None

            got: dict[str, list[ClaimedRun]] = {}

            async def second() -> None:
                got["w2"] = await _claim(store, clock, "w2")

            with anyio.fail_after(20):
                async with anyio.create_task_group() as group:
                    group.start_soon(second)
                    await eventually(gate_waits)  # w2's ranking has its snapshot
                    (run,) = await _claim(store, clock, "w1")
                    await store.start_node(run.lease, NodeStart(node="a", attempt=1), clock.now())
                    if ended:
                        end = NodeEnd(
                            node="a",
                            attempt=1,
                            outcome=AttemptOutcome.COMPLETED,
                            state=NodeState.COMPLETED,
                            output=1,
                        )
                        await store.end_node(run.lease, end, clock.now())
                    await store.release_lease(run.lease)  # w1 shuts down: handed back
                    after = await store.get(task.id, clock.now())
                    assert after is not None
                    assert after.version == version
                    await admin.execute("SELECT pg_advisory_unlock(4242)")
        (taken,) = got["w2"]
        # node a ran (completed, or started and interrupted): w2 must see its checkpoint
        assert set(taken.nodes) == {"a"}, taken.nodes
