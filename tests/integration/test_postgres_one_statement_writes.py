"""A node's start and end on PostgreSQL: one statement, committed as it ends (ADR 0050),
with the starts (or ends) of any runs that wait at one moment (ADR 0052).

Without BEGIN and COMMIT around it, a connection lost while the statement runs leaves
its outcome unknown, as a lost COMMIT does: the store must say so to every caller whose
write it carried and never send it again (a start sent twice would count an attempt
twice). A connection the server closed while it was pooled has sent nothing yet: that
write goes through a transaction and is retried (``test_postgres_restart.py``).
"""

from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
import pytest
from psycopg import sql

from taskloom.engine.errors import OutcomeUnknownError, PersistenceError
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import Task
from taskloom.engine.runs import AttemptOutcome, Lease, NodeEnd, NodeStart, NodeState
from taskloom.engine.states import TaskState
from taskloom.persistence.postgres import PostgresTaskStore
from taskloom.testing import FakeClock
from tests import postgres


@pytest.fixture
async def store() -> AsyncIterator[PostgresTaskStore]:
    async with postgres.fresh_store(retry_s=30) as opened:
        yield opened


async def _start_stopped_by_the_server(
    store: PostgresTaskStore, stop: str, runs: int = 1
) -> tuple[list[PersistenceError], int]:
    """Start a node of each of *runs* new runs at once (one statement) while the first
    run's lease row is locked elsewhere (the start's fence share-locks it: it waits),
    then *stop* (``pg_terminate_backend`` or ``pg_cancel_backend``) the waiting backend:
    what the starts raised, and how many attempts of the runs were written."""
    clock = FakeClock()
    manager = TaskManager(store, clock=clock)
    tasks = [await manager.create("job") for _ in range(runs)]
    claimed = await store.claim_runs(
        worker="w",
        workflows=frozenset({"job"}),
        now=clock.now(),
        lease_for=timedelta(seconds=60),
        limit=runs,
        start=claim_start(clock.now()),
    )
    assert len(claimed) == runs
    task = tasks[0]
    schema = store.settings.schema_name
    failures: list[PersistenceError] = []

    async def start(lease: Lease) -> None:
        try:
            await store.start_node(lease, NodeStart(node="a", attempt=1), clock.now())
        except PersistenceError as error:
            failures.append(error)

    async with postgres.row_held(store, "leases", "task_id", task.id) as hold:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for each in claimed:
                    group.start_soon(start, each.lease)
                await hold.stop_the_waiting(stop)
        await hold.release()
        cursor = await hold.admin.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE task_id = ANY(%s)").format(
                sql.Identifier(schema, "node_attempts")
            ),
            ([each.id for each in tasks],),
        )
        found = await cursor.fetchone()
    assert found is not None
    return failures, int(found[0])


async def test_a_start_whose_connection_is_lost_midway_is_an_unknown_outcome_sent_once(
    store: PostgresTaskStore,
) -> None:
    failures, attempts = await _start_stopped_by_the_server(store, "pg_terminate_backend")
    assert len(failures) == 1  # not retried on another connection
    assert isinstance(failures[0], OutcomeUnknownError), failures[0]
    assert attempts == 0  # this one was not written (terminated)


async def test_a_batch_whose_connection_is_lost_is_an_unknown_outcome_for_each_caller(
    store: PostgresTaskStore,
) -> None:
    """Three runs' starts in one statement, its backend terminated: each of the three
    callers hears that the outcome is unknown, and none is sent again."""
    failures, attempts = await _start_stopped_by_the_server(store, "pg_terminate_backend", 3)
    assert [type(each) for each in failures] == [OutcomeUnknownError] * 3
    assert attempts == 0


async def test_a_start_the_server_refuses_is_known_not_to_have_landed(
    store: PostgresTaskStore,
) -> None:
    """A statement the server ends with an ERROR (here cancelled, as ``statement_timeout``
    would; disk full, out of memory) rolled back its own transaction and the session goes
    on: nothing was written, and the store must say so, not "the connection failed, the
    outcome is unknown" (which also reports an outage, and gives up on the transient
    ones that a transaction would retry)."""
    failures, attempts = await _start_stopped_by_the_server(store, "pg_cancel_backend")
    assert len(failures) == 1
    assert not isinstance(failures[0], OutcomeUnknownError), failures[0]
    assert attempts == 0
    assert "canceling statement" in str(failures[0])


async def test_a_node_start_and_end_are_one_round_trip_and_a_run_end_five(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted as psycopg sends them (ADR 0050): the cost model of docs/postgresql.md."""
    clock = FakeClock()
    (claimed,) = await postgres.claimed_jobs(store, clock)
    sent = postgres.statements_sent(monkeypatch)
    lease = claimed.lease
    await store.start_node(lease, NodeStart(node="a", attempt=1), clock.now())
    assert len(sent) == 1
    sent.clear()
    await store.end_node(lease, _end("a"), clock.now())
    assert len(sent) == 1
    await store.start_node(lease, NodeStart(node="b", attempt=1), clock.now())
    sent.clear()

    def complete(task: Task) -> Task:
        changes = {"state": TaskState.COMPLETED, "version": task.version + 1}
        return task.model_copy(update={**changes, "updated_at": clock.now()})

    clock.advance(1)
    _, done = await store.finish_run(lease, _end("b"), clock.now(), complete)
    assert done.state is TaskState.COMPLETED
    # BEGIN, the task locked, the node's end, the task + history + lease + children, COMMIT
    assert sent == ["BEGIN", "SELECT", "WITH", "WITH", "COMMIT"]


async def test_node_writes_that_wait_together_are_one_statement(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forty starts of two runs made at once, then their forty ends: a statement or two
    of each kind (one per batch), not forty (ADR 0052)."""
    clock = FakeClock()
    claimed = await postgres.claimed_jobs(store, clock, 2)
    writes = [(each.lease, f"n{index}") for each in claimed for index in range(20)]
    sent = postgres.statements_sent(monkeypatch)
    async with anyio.create_task_group() as group:
        for lease, node in writes:
            group.start_soon(store.start_node, lease, NodeStart(node=node, attempt=1), clock.now())
    assert 1 <= len(sent) <= 2, sent
    sent.clear()
    async with anyio.create_task_group() as group:
        for lease, node in writes:
            group.start_soon(store.end_node, lease, _end(node), clock.now())
    assert 1 <= len(sent) <= 2, sent
    for each in claimed:
        stored = await store.checkpoints(each.lease.task_id)
        assert {run.state for run in stored.values()} == {NodeState.COMPLETED}
        assert len(stored) == 20


def _end(node: str) -> NodeEnd:
    return NodeEnd(
        node=node,
        attempt=1,
        outcome=AttemptOutcome.COMPLETED,
        state=NodeState.COMPLETED,
        output=1,
    )
