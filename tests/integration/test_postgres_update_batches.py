"""A worker's fenced task updates (its progress writes) and runs' final writes on
PostgreSQL (ADR 0055). Progress writes that wait at one moment go as one read and one
write statement, with ADR 0052's outcome rules: each row its own fence and answer, a
lost connection an unknown outcome for every caller (nothing sent again), a statement's
own error each write sent again alone. Final writes that wait at one moment go as one
transaction: each row its own checks, a connection lost before the commit retried as
any transaction, a statement's own error each write sent again alone."""

from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import sql

from taskloom.engine import cascade, claims
from taskloom.engine.errors import (
    LeaseLostError,
    OutcomeUnknownError,
    PersistenceError,
)
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import Task
from taskloom.engine.runs import (
    AttemptOutcome,
    ClaimedRun,
    Lease,
    NodeEnd,
    NodeRun,
    NodeStart,
    NodeState,
)
from taskloom.engine.states import TaskState
from taskloom.persistence.postgres import PostgresTaskStore, finishes, takes, updates
from taskloom.persistence.postgres.settings import PostgresSettings
from taskloom.persistence.sql.dialect import POSTGRES
from taskloom.persistence.sql.leases import Taking
from taskloom.persistence.sql.script import Statement
from taskloom.testing import FakeClock
from tests import postgres
from tests.helpers import all_at_once, eventually


@pytest.fixture
async def store() -> AsyncIterator[PostgresTaskStore]:
    async with postgres.fresh_store(retry_s=30) as opened:
        yield opened


async def _report_all(
    manager: TaskManager, claimed: Sequence[ClaimedRun], message: str = "half"
) -> list[Task | Exception]:
    """Every run's progress reported at once: what each caller got."""
    return await all_at_once(
        [
            partial(
                manager.report_progress,
                run.lease.task_id,
                completed=1,
                total=2,
                message=message,
                lease=run.lease,
            )
            for run in claimed
        ]
    )


async def _versions(store: PostgresTaskStore, claimed: Sequence[ClaimedRun]) -> list[int]:
    clock = FakeClock()
    found = [await store.get(each.lease.task_id, clock.now()) for each in claimed]
    return [task.version for task in found if task is not None]


def _breaking(
    build: Callable[[Any, Sequence[cascade.Put]], Statement], culprit: str
) -> Callable[[Any, Sequence[cascade.Put]], Statement]:
    """*build*, with *culprit*'s body in its arrays made text the server cannot read as
    JSON: the statement fails as a whole."""

    def broken(payloads: Any, puts: Sequence[cascade.Put]) -> Statement:
        statement = build(payloads, puts)
        parameters: Any = statement.parameters
        parameters["body"] = [
            "{not json" if task == culprit else body
            for task, body in zip(parameters["task"], parameters["body"], strict=True)
        ]
        return statement

    return broken


async def test_progress_writes_that_wait_together_are_one_read_and_one_write(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    claimed = await postgres.claimed_jobs(store, clock, 6)
    before = await _versions(store, claimed)
    manager = TaskManager(store, clock=clock)
    sent = postgres.statements_sent(monkeypatch)
    got = await _report_all(manager, claimed)
    assert sent == ["SELECT", "WITH"], sent  # one batch: its read, its write
    assert all(isinstance(each, Task) for each in got), got
    assert await _versions(store, claimed) == [version + 1 for version in before]
    for each in claimed:
        stored = await store.get(each.lease.task_id, clock.now())
        assert stored is not None
        assert stored.status_message == "half"
        assert stored.progress is not None
        assert stored.progress.completed == 1
        _, entries = await store.history(each.lease.task_id, clock.now()) or (None, [])
        assert entries[-1].status_message == "half"  # its history row too


async def test_progress_writes_carry_any_text_through_their_arrays(
    store: PostgresTaskStore,
) -> None:
    """The arrays go in binary (ADR 0061): a message with what an array literal would
    escape (quotes, backslashes, braces, commas, the word NULL, blanks) lands as sent,
    in the task's body and in its history row."""
    clock = FakeClock()
    claimed = await postgres.claimed_jobs(store, clock, 3)
    manager = TaskManager(store, clock=clock)
    message = 'a "quoted" \\ {braced, listed} NULL \n\t\u00e9 \u2211 \U0001f642 '
    got = await _report_all(manager, claimed, message)
    assert all(isinstance(each, Task) for each in got), got
    for each in claimed:
        stored = await store.get(each.lease.task_id, clock.now())
        assert stored is not None
        assert stored.status_message == message
        _, entries = await store.history(each.lease.task_id, clock.now()) or (None, [])
        assert entries[-1].status_message == message


async def test_a_lost_lease_refuses_only_its_own_progress_write(
    store: PostgresTaskStore,
) -> None:
    clock = FakeClock()
    claimed = await postgres.claimed_jobs(store, clock, 3)
    before = await _versions(store, claimed)
    await store.release_lease(claimed[1].lease)  # its worker lost it
    got = await _report_all(TaskManager(store, clock=clock), claimed)
    assert isinstance(got[1], LeaseLostError), got[1]
    assert isinstance(got[0], Task), got
    assert isinstance(got[2], Task), got
    assert await _versions(store, claimed) == [before[0] + 1, before[1], before[2] + 1]


async def _written(
    store: PostgresTaskStore, payloads: list[updates.Payload], puts: list[cascade.Put]
) -> list[updates.Outcome | None]:
    """The batch's write statement sent as the store sends it, and its answers."""
    statement = updates.writes(payloads, puts)
    async with store._db.pool.connection() as connection:  # the statement itself
        cursor = await connection.execute(statement.text, statement.parameters)
        found = await cursor.fetchall()
    return updates.written(payloads, puts, found)


def _progress(message: str) -> Any:
    def mutate(task: Task) -> Task:
        return task.model_copy(update={"version": task.version + 1, "status_message": message})

    return mutate


async def test_the_write_statement_fences_each_row_and_compares_its_version(
    store: PostgresTaskStore,
) -> None:
    """The statement's own checks, after the read (a lease lost, a task written by
    another process meanwhile): only that row is refused (or left to be written alone),
    and nothing of it is written."""
    clock = FakeClock()
    claimed = await postgres.claimed_jobs(store, clock, 3)
    tasks = [await store.get(each.lease.task_id, clock.now()) for each in claimed]
    payloads: list[updates.Payload] = []
    puts: list[cascade.Put] = []
    for each, task in zip(claimed, tasks, strict=True):
        assert task is not None
        mutate = _progress("batched")
        payloads.append((task.id, clock.now(), mutate, each.lease))
        puts.append(cascade.Put(task, mutate(task)))
    stolen = claimed[0].lease
    payloads[0] = (stolen.task_id, clock.now(), _progress("batched"), _stale(stolen))
    await TaskManager(store, clock=clock).report_progress(  # another write of the third
        claimed[2].lease.task_id, completed=1, message="meanwhile", lease=claimed[2].lease
    )
    answers = await _written(store, payloads, puts)
    assert answers[0] is not None
    assert isinstance(answers[0][1], LeaseLostError), answers[0]
    assert answers[1] == (True, puts[1].after)
    assert answers[2] is None  # changed since: written alone, as before
    stored = [await store.get(each.lease.task_id, clock.now()) for each in claimed]
    assert [task.status_message if task else None for task in stored] == [
        tasks[0].status_message if tasks[0] else None,
        "batched",
        "meanwhile",
    ]


def _stale(lease: Lease) -> Lease:
    return lease.model_copy(update={"token": "not-" + lease.token})


async def test_a_batch_whose_connection_is_lost_is_an_unknown_outcome_for_each_caller(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three runs' progress in one write statement, its backend terminated while it waits
    for a lease row: each caller hears that the outcome is unknown, none is sent again
    (and nothing of it was written)."""
    clock = FakeClock()
    claimed = await postgres.claimed_jobs(store, clock, 3)
    before = await _versions(store, claimed)
    sent = postgres.statements_sent(monkeypatch)
    async with postgres.row_held(store, "leases", "task_id", claimed[0].lease.task_id) as hold:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(hold.stop_the_waiting)
                got = await _report_all(TaskManager(store, clock=clock), claimed)
    assert [type(each) for each in got] == [OutcomeUnknownError] * 3, got
    assert sent.count("WITH") == 1, sent  # not sent again, together or alone
    assert await _versions(store, claimed) == before


async def test_a_statement_error_sends_each_write_again_alone(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row that breaks the statement (here a body the server cannot read as JSON)
    fails the batch; each write is then sent alone, so only the culprit fails."""
    clock = FakeClock()
    claimed = await postgres.claimed_jobs(store, clock, 3)
    before = await _versions(store, claimed)
    culprit = claimed[1].lease.task_id
    monkeypatch.setattr(updates, "writes", _breaking(updates.writes, culprit))
    sent = postgres.statements_sent(monkeypatch)
    got = await _report_all(TaskManager(store, clock=clock), claimed)
    assert isinstance(got[1], PersistenceError), got[1]
    assert not isinstance(got[1], OutcomeUnknownError)
    assert isinstance(got[0], Task), got
    assert isinstance(got[2], Task), got
    assert sent.count("WITH") == 4, sent  # the batch, then each of the three alone
    assert await _versions(store, claimed) == [before[0] + 1, before[1], before[2] + 1]


# -- runs' final writes ----------------------------------------------------------------


def _complete(clock: FakeClock) -> Any:
    def complete(task: Task) -> Task:
        changes = {"state": TaskState.COMPLETED, "version": task.version + 1}
        return task.model_copy(update={**changes, "updated_at": clock.now()})

    return complete


def _end(node: str) -> NodeEnd:
    return NodeEnd(
        node=node, attempt=1, outcome=AttemptOutcome.COMPLETED, state=NodeState.COMPLETED, output=1
    )


async def _started(store: PostgresTaskStore, clock: FakeClock, runs: int) -> list[ClaimedRun]:
    """*runs* claimed runs, each with its node ``a`` running."""
    claimed = await postgres.claimed_jobs(store, clock, runs)
    for each in claimed:
        await store.start_node(each.lease, NodeStart(node="a", attempt=1), clock.now())
    clock.advance(1)
    return claimed


async def _finish_all(
    store: PostgresTaskStore, clock: FakeClock, claimed: Sequence[ClaimedRun]
) -> list[tuple[NodeRun, Task] | Exception]:
    """Every run's final write at once: what each caller got."""
    return await all_at_once(
        [
            partial(store.finish_run, run.lease, _end("a"), clock.now(), _complete(clock))
            for run in claimed
        ]
    )


async def _states(
    store: PostgresTaskStore, clock: FakeClock, claimed: Sequence[ClaimedRun]
) -> list[tuple[TaskState, NodeState, int]]:
    """Each run's state, its node's, and how many times its completion was recorded."""
    found = []
    for each in claimed:
        task_id = each.lease.task_id
        task = await store.get(task_id, clock.now())
        assert task is not None
        checkpoints = await store.checkpoints(task_id)
        _, entries = await store.history(task_id, clock.now()) or (None, [])
        ends = sum(entry.state is TaskState.COMPLETED for entry in entries)
        found.append((task.state, checkpoints["a"].state, ends))
    return found


async def test_final_writes_that_wait_together_are_one_transaction(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    claimed = await _started(store, clock, 5)
    sent = postgres.statements_sent(monkeypatch)
    got = await _finish_all(store, clock, claimed)
    # the tasks held, the node ends, the tasks + history + leases + run ends; its BEGIN
    # sets the generic plans (ADR 0063)
    assert sent == ["BEGIN;", "WITH", "WITH", "WITH", "COMMIT"], sent
    for each in got:
        assert not isinstance(each, Exception), each
        run, task = each
        assert run.state is NodeState.COMPLETED
        assert task.state is TaskState.COMPLETED
    done = (TaskState.COMPLETED, NodeState.COMPLETED, 1)
    assert await _states(store, clock, claimed) == [done] * 5
    for run_of in claimed:  # the lease dropped with the run's end
        with pytest.raises(LeaseLostError):
            await store.start_node(run_of.lease, NodeStart(node="b", attempt=1), clock.now())


async def test_a_lost_lease_or_a_node_not_running_refuses_only_its_own_final_write(
    store: PostgresTaskStore,
) -> None:
    """Refused by the node end's own checks in the batch: nothing of that run is written
    (its task stays running), the others end."""
    clock = FakeClock()
    claimed = await _started(store, clock, 4)
    await store.release_lease(claimed[1].lease)  # its worker lost it
    await store.end_node(claimed[2].lease, _end("a"), clock.now())  # ended before
    got = await _finish_all(store, clock, claimed)
    assert isinstance(got[1], LeaseLostError), got[1]
    assert isinstance(got[2], LeaseLostError), got[2]  # not running that attempt
    assert not isinstance(got[0], Exception), got[0]
    assert not isinstance(got[3], Exception), got[3]
    done = (TaskState.COMPLETED, NodeState.COMPLETED, 1)
    assert await _states(store, clock, claimed) == [
        done,
        (TaskState.RUNNING, NodeState.RUNNING, 0),
        (TaskState.RUNNING, NodeState.COMPLETED, 0),
        done,
    ]


async def test_a_batch_of_final_writes_cut_off_before_its_commit_is_written_once(
    store: PostgresTaskStore,
) -> None:
    """Its backend terminated while it waits for a lease row: nothing was committed, so
    the transaction runs again on another connection; each run ends once."""
    clock = FakeClock()
    claimed = await _started(store, clock, 3)
    async with postgres.row_held(store, "leases", "task_id", claimed[0].lease.task_id) as hold:

        async def terminate() -> None:
            await hold.stop_the_waiting()
            await hold.release()  # the retry may go on

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(terminate)
                got = await _finish_all(store, clock, claimed)
    assert [type(each) for each in got] == [tuple] * 3, got
    assert (
        await _states(store, clock, claimed) == [(TaskState.COMPLETED, NodeState.COMPLETED, 1)] * 3
    )


async def test_a_statement_error_sends_each_final_write_again_alone(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row that breaks the batch's last statement rolls the whole batch back; each
    final write is then sent alone (its own transaction, as before), once."""
    clock = FakeClock()
    claimed = await _started(store, clock, 3)
    culprit = claimed[1].lease.task_id
    monkeypatch.setattr(finishes, "run_ends", _breaking(finishes.run_ends, culprit))
    sent = postgres.statements_sent(monkeypatch)
    got = await _finish_all(store, clock, claimed)
    assert [type(each) for each in got] == [tuple] * 3, got
    assert sent.count("BEGIN;") == 1, sent  # the batch
    assert sent.count("BEGIN") == 3, sent  # then each of the three alone
    assert sent.count("COMMIT") == 3, sent  # the batch rolled back
    assert (
        await _states(store, clock, claimed) == [(TaskState.COMPLETED, NodeState.COMPLETED, 1)] * 3
    )


async def test_a_claim_takes_its_runs_with_one_statement_and_reads_their_checkpoints(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim of four queued runs, one with a checkpoint (a fork's copy): BEGIN, the
    ranking, the leases with the tasks and their history rows, the checkpoints, COMMIT
    (five round trips whatever the number of runs); each run is running, leased, has
    its ``claimed`` history row, and the fork has its checkpoint."""
    clock = FakeClock()
    (source,) = await _started(store, clock, 1)
    await store.end_node(source.lease, _end("a"), clock.now())
    fork = source.task.model_copy(update={"id": "fork-of-source", "state": TaskState.QUEUED})
    await store.fork_run(fork, source=source.task.id, nodes=frozenset({"a"}), now=clock.now())
    manager = TaskManager(store, clock=clock)
    fresh = [await manager.create("job") for _ in range(3)]
    sent = postgres.statements_sent(monkeypatch)
    claimed = await store.claim_runs(
        worker="w2",
        workflows=frozenset({"job"}),
        now=clock.now(),
        lease_for=timedelta(seconds=60),
        limit=10,
        start=claim_start(clock.now()),
    )
    assert sent == ["BEGIN;", "WITH", "WITH", "SELECT", "COMMIT"], sent
    assert sorted(run.lease.task_id for run in claimed) == sorted(
        ["fork-of-source", *(task.id for task in fresh)]
    )
    for run in claimed:
        assert run.task.state is TaskState.RUNNING
        stored = await store.get(run.lease.task_id, clock.now())
        assert stored == run.task
        _, entries = await store.history(run.lease.task_id, clock.now()) or (None, [])
        assert entries[-1].state is TaskState.RUNNING
        expected = {"a": NodeState.COMPLETED} if run.lease.task_id == "fork-of-source" else {}
        assert {name: node.state for name, node in run.nodes.items()} == expected
        assert run.resumed is bool(expected)
        await store.start_node(run.lease, NodeStart(node="b", attempt=1), clock.now())


async def test_a_claim_of_runs_that_never_ran_reads_no_checkpoints(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs with neither a lease nor a checkpoint when ranked have none to read: BEGIN,
    the ranking, the takes, COMMIT (ADR 0063). A run whose lease expired is read as
    before: its former holder's node end is its checkpoint."""
    clock = FakeClock()
    manager = TaskManager(store, clock=clock)
    fresh = [await manager.create("job") for _ in range(3)]
    sent = postgres.statements_sent(monkeypatch)
    claimed = await _claim_jobs(store, clock, worker="w", lease_for=timedelta(seconds=5))
    assert sent == ["BEGIN;", "WITH", "WITH", "COMMIT"], sent
    assert sorted(run.lease.task_id for run in claimed) == sorted(task.id for task in fresh)
    assert all(run.nodes == {} and not run.resumed for run in claimed)
    former = claimed[0]
    await store.start_node(former.lease, NodeStart(node="a", attempt=1), clock.now())
    await store.end_node(former.lease, _end("a"), clock.now())
    clock.advance(10)  # every lease has expired
    sent.clear()
    again = await _claim_jobs(store, clock, worker="w2", lease_for=timedelta(seconds=60))
    assert sent == ["BEGIN;", "WITH", "WITH", "SELECT", "COMMIT"], sent
    nodes = {run.lease.task_id: set(run.nodes) for run in again}
    assert nodes == {run.lease.task_id: {"a"} if run is former else set() for run in claimed}
    assert all(run.resumed for run in again)


async def _claim_jobs(
    store: PostgresTaskStore, clock: FakeClock, *, worker: str, lease_for: timedelta
) -> Sequence[ClaimedRun]:
    return await store.claim_runs(
        worker=worker,
        workflows=frozenset({"job"}),
        now=clock.now(),
        lease_for=lease_for,
        limit=10,
        start=claim_start(clock.now()),
    )


_ARRAY_STATEMENTS = {
    "the claim's takes": "INSERT INTO leases (task_id, worker, token, expires_at) SELECT",
    "the final writes' tasks held": "SKIP LOCKED) SELECT h.body",
    "the final writes' run ends": "dropped AS (DELETE FROM leases",
}


async def test_the_claims_and_final_writes_statements_are_planned_once() -> None:
    """Their prepared statements run on their generic plan: PostgreSQL's default would
    make a custom plan at every execution (ADR 0063). One connection, so that every
    execution lands on one session's prepared statements."""
    clock = FakeClock()
    async with postgres.fresh_store(retry_s=30, min_connections=1, max_connections=1) as store:
        for _ in range(8):  # psycopg prepares a statement at its sixth execution
            claimed = await _started(store, clock, 2)
            got = await _finish_all(store, clock, claimed)
            assert all(not isinstance(each, Exception) for each in got), got
        async with store._db.pool.connection() as connection:
            cursor = await connection.execute(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            )
            prepared = await cursor.fetchall()
    plans = {
        name: [(generic, custom) for text, generic, custom in prepared if marker in text]
        for name, marker in _ARRAY_STATEMENTS.items()
    }
    for name, found in plans.items():
        assert len(found) == 1, (name, prepared)
        generic, custom = found[0]
        assert custom == 0, (name, generic, custom)
        assert generic >= 1, (name, generic, custom)


async def test_a_run_whose_lease_is_held_elsewhere_is_not_taken_nor_written(
    store: PostgresTaskStore,
) -> None:
    """The claim's statement writes the task and history rows of the runs whose lease it
    took, and only those: a run another worker leased since the ranking stays as it was."""
    clock = FakeClock()
    manager = TaskManager(store, clock=clock)
    free, held = sorted([await manager.create("job"), await manager.create("job")], key=_id)
    async with await psycopg.AsyncConnection.connect(postgres.TEST_URL, autocommit=True) as admin:
        await admin.execute(
            sql.SQL(
                "INSERT INTO {} (task_id, worker, token, expires_at)"
                " VALUES (%s, 'other', 'theirs', now() + interval '1 hour')"
            ).format(sql.Identifier(store.settings.schema_name, "leases")),
            (held.id,),
        )
    start = claim_start(clock.now())
    taking: list[Taking] = []
    for task in (free, held):
        started, lease = claims.take(
            task, worker="w", token=claims.new_token(), expires_at=clock.now(), start=start
        )
        taking.append((task, started, lease))
    taken = await store._transact(  # the claim's takes alone, as a claim runs them
        lambda: takes.take_all(POSTGRES, taking, clock.now(), None)
    )
    assert taken == {free.id: {}}
    stored = {task.id: await store.get(task.id, clock.now()) for task in (free, held)}
    assert stored[free.id] == taking[0][1]
    assert stored[held.id] == held  # not written
    _, entries = await store.history(held.id, clock.now()) or (None, [])
    assert [entry.state for entry in entries] == [TaskState.QUEUED]


def _id(task: Task) -> str:
    return task.id


# -- the batches' task locks ---------------------------------------------------------------


async def _key_shared_meanwhile(
    store: PostgresTaskStore, task_id: str, batch: Any
) -> tuple[list[Any], bool]:
    """*batch* run while another transaction holds *task_id*'s row ``FOR KEY SHARE`` (the
    lock the foreign-key check of a node write's insert takes): what it gave, and whether
    a connection of the store waited for that lock (then released, so that it ends)."""
    waited = False
    async with postgres.row_held(store, "tasks", "id", task_id, "FOR KEY SHARE") as hold:
        got: list[Any] = []

        async def run() -> None:
            got.extend(await batch())
            group.cancel_scope.cancel()

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(run)
                await eventually(hold.one_waits, within_s=25)
                waited = True
                await hold.release()  # let it end
                await anyio.sleep_forever()
    return got, waited


async def test_a_node_writes_foreign_key_check_holds_up_no_progress_write(
    store: PostgresTaskStore,
) -> None:
    """Writers hold task rows ``FOR NO KEY UPDATE`` (ADR 0009): the foreign-key check of
    a node write's insert (``FOR KEY SHARE`` on its task row) neither waits for a batch
    of progress writes nor makes it wait (waiting while holding other task rows, it
    could deadlock with the node writes, which hold their lease rows)."""
    clock = FakeClock()
    claimed = await postgres.claimed_jobs(store, clock, 3)
    manager = TaskManager(store, clock=clock)
    got, waited = await _key_shared_meanwhile(
        store, claimed[1].lease.task_id, partial(_report_all, manager, claimed)
    )
    assert not waited
    assert all(isinstance(each, Task) for each in got), got


async def test_a_node_writes_foreign_key_check_holds_up_no_final_writes(
    store: PostgresTaskStore,
) -> None:
    """As for progress writes: a batch of final writes holds its task rows ``FOR NO KEY
    UPDATE``, as every writer does."""
    clock = FakeClock()
    claimed = await _started(store, clock, 3)
    got, waited = await _key_shared_meanwhile(
        store, claimed[1].lease.task_id, partial(_finish_all, store, clock, claimed)
    )
    assert not waited
    assert not any(isinstance(each, Exception) for each in got), got


async def _in_lock_order(store: PostgresTaskStore, claimed: Sequence[ClaimedRun]) -> list[str]:
    """The task ids of *claimed* in the order a statement holds them (``ORDER BY id``)."""
    schema = store.settings.schema_name
    ids = [each.lease.task_id for each in claimed]
    async with await psycopg.AsyncConnection.connect(postgres.TEST_URL) as connection:
        cursor = await connection.execute(
            sql.SQL("SELECT id FROM {} WHERE id = ANY(%s) ORDER BY id").format(
                sql.Identifier(schema, "tasks")
            ),
            (ids,),
        )
        return [task_id for (task_id,) in await cursor.fetchall()]


async def _held_then_other(store: PostgresTaskStore, first: str, then: str, batch: Any) -> None:
    """*batch* run while another transaction holds *first*'s row, as a cascade holds a
    parent before its children (or a child's end the child before its parent); once a
    connection of the store waits, that transaction takes *then*'s row too (with a lock
    timeout well under the deadlock detector's second): it must not find it held."""
    schema = store.settings.schema_name
    lock = sql.SQL("SELECT 1 FROM {} WHERE id = %s FOR NO KEY UPDATE").format(
        sql.Identifier(schema, "tasks")
    )
    async with postgres.row_held(store, "tasks", "id", first, "FOR NO KEY UPDATE") as hold:
        await hold.holder.execute("SET LOCAL lock_timeout = '300ms'")

        async def take_then() -> None:
            try:
                await eventually(hold.one_waits, within_s=25)
                await hold.holder.execute(lock, (then,))
            finally:
                await hold.release()  # either way, let the store's writes end

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(take_then)
                await batch()


async def test_a_batch_of_progress_writes_waits_for_no_task_row_another_writer_holds(
    store: PostgresTaskStore,
) -> None:
    """Task rows have no one lock order: a batch that held one while waiting for another
    would deadlock with a cascade holding them the other way round. A row another writer
    holds is passed over and written alone after the batch (the lone update waits for
    it, holding nothing else); the others are written, their rows free at once."""
    clock = FakeClock()
    claimed = await postgres.claimed_jobs(store, clock, 2)
    low, high = await _in_lock_order(store, claimed)
    manager = TaskManager(store, clock=clock)
    got: list[Any] = []

    async def batch() -> None:
        got.extend(await _report_all(manager, claimed))

    await _held_then_other(store, high, low, batch)
    assert all(isinstance(each, Task) for each in got), got
    assert [each.status_message for each in got] == ["half", "half"]


async def test_a_batch_of_final_writes_waits_for_no_task_row_another_writer_holds(
    store: PostgresTaskStore,
) -> None:
    """As for progress writes: a final write whose task row another writer holds is
    written alone after the batch, whose transaction holds only rows it could take."""
    clock = FakeClock()
    claimed = await _started(store, clock, 2)
    low, high = await _in_lock_order(store, claimed)
    got: list[Any] = []

    async def batch() -> None:
        got.extend(await _finish_all(store, clock, claimed))

    await _held_then_other(store, high, low, batch)
    assert not any(isinstance(each, Exception) for each in got), got
    done = (TaskState.COMPLETED, NodeState.COMPLETED, 1)
    assert await _states(store, clock, claimed) == [done, done]


# -- the store closing -------------------------------------------------------------------


async def test_final_and_progress_writes_shielded_while_everything_around_stops_land() -> None:
    """A cancel of the scope around the open store (a SIGTERM) does not stop the senders
    of these batches before its block ends: the final writes and progress writes its
    user makes in a shielded scope meanwhile (the runner does) go together and land."""
    postgres.require_server()
    name = postgres.new_schema_name()
    settings = PostgresSettings(url=postgres.TEST_URL, schema_name=name)
    clock = FakeClock()
    try:
        with anyio.fail_after(30), anyio.CancelScope() as everything:
            async with PostgresTaskStore.open(settings) as store:
                claimed = await _started(store, clock, 4)
                everything.cancel()
                with anyio.CancelScope(shield=True):
                    progress = await _report_all(TaskManager(store, clock=clock), claimed[2:])
                    finished = await _finish_all(store, clock, claimed[:2])
        assert all(isinstance(each, Task) for each in progress), progress
        assert not any(isinstance(each, Exception) for each in finished), finished
        async with PostgresTaskStore.open(settings) as store:
            done = (TaskState.COMPLETED, NodeState.COMPLETED, 1)
            assert await _states(store, clock, claimed[:2]) == [done, done]
            for each in claimed[2:]:
                task = await store.get(each.lease.task_id, clock.now())
                assert task is not None
                assert task.status_message == "half"
    finally:
        await postgres.drop_schema(name)
