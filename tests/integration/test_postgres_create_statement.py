"""A create without an idempotency key on PostgreSQL: one statement committed as it
ends (ADR 0061), the task's row and its creation's history row together.

Without BEGIN and COMMIT around it, the outcome rules are ADR 0050's: an ERROR the
server gives the statement wrote nothing (neither row). A connection lost while it runs
leaves the outcome unknown to the statement, but not to the store: the task's id is
fixed, so it sends the statement again writing nothing if the id is stored, and reads
the row back. A create with a key keeps its transaction (it may read and replace an
expired holder of the key).
"""

from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import sql

from taskloom.engine.errors import (
    DatabaseUnavailableError,
    OutcomeUnknownError,
    PersistenceError,
)
from taskloom.engine.history import Cause
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import TaskId
from taskloom.engine.states import TaskState
from taskloom.persistence.postgres import PostgresTaskStore, rows
from taskloom.testing import FakeClock
from tests import postgres


@pytest.fixture
async def store() -> AsyncIterator[PostgresTaskStore]:
    async with postgres.fresh_store(retry_s=30) as opened:
        yield opened


async def test_a_create_is_one_statement_with_its_history_row(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    manager = TaskManager(store, clock=clock)
    sent = postgres.statements_sent(monkeypatch)
    task = await manager.create("job", {"n": 1})
    assert sent == ["WITH"]
    stored = await store.get(task.id, clock.now())
    assert stored == task
    _, entries = await store.history(task.id, clock.now()) or (None, [])
    assert [(entry.state, entry.cause, entry.state_changed) for entry in entries] == [
        (TaskState.QUEUED, Cause.CREATED, True)
    ]
    assert entries[0].version == task.version


async def test_a_create_with_a_key_keeps_its_transaction(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = TaskManager(store, clock=FakeClock())
    sent = postgres.statements_sent(monkeypatch)
    first = await manager.create("job", idempotency_key="k")
    assert sent[0] == "BEGIN", sent
    assert sent[-1] == "COMMIT", sent
    assert await manager.create("job", idempotency_key="k") == first


async def _insert_held(store: PostgresTaskStore, stop: str) -> tuple[Exception | None, int]:
    """Create a task while another connection's uncommitted insert of the same id holds
    it up, then *stop* (``pg_terminate_backend`` or ``pg_cancel_backend``) the waiting
    backend: what the create raised, and how many rows of the task (and of its history)
    are there once the other insert is rolled back."""
    clock = FakeClock()
    manager = TaskManager(store, clock=clock)
    task = manager.draft("job")
    schema = store.settings.schema_name
    failure: Exception | None = None
    async with (
        await psycopg.AsyncConnection.connect(postgres.TEST_URL) as holder,
        await psycopg.AsyncConnection.connect(postgres.TEST_URL, autocommit=True) as admin,
    ):
        await holder.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        await holder.execute(rows.INSERT_SQL, rows.insert_row(task))
        hold = postgres.RowHold(store, holder, admin)

        async def create() -> None:
            nonlocal failure
            try:
                await store.create(task, clock.now())
            except PersistenceError as error:
                failure = error

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(create)
                await hold.stop_the_waiting(stop)
                await holder.rollback()
        counted = await admin.execute(
            sql.SQL(
                "SELECT (SELECT count(*) FROM {} WHERE id = %s)"
                " + (SELECT count(*) FROM {} WHERE task_id = %s)"
            ).format(sql.Identifier(schema, "tasks"), sql.Identifier(schema, "task_history")),
            (task.id, task.id),
        )
        found = await counted.fetchone()
    assert found is not None
    return failure, int(found[0])


async def test_a_create_whose_connection_is_lost_midway_is_made_once(
    store: PostgresTaskStore,
) -> None:
    failure, written = await _insert_held(store, "pg_terminate_backend")
    assert failure is None, failure
    assert written == 2  # the task's row and its history row, once


def _lost_after(store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch, *, ran: bool) -> None:
    """The store's next statement sent alone ends in an unknown outcome, after it ran
    (*ran*: committed, its answer lost) or without running; the others are as they are."""
    alone = store._db.alone
    lost = [True]

    async def once_lost(work: Any) -> Any:
        if not lost:
            return await alone(work)
        lost.clear()
        if ran:
            await alone(work)
        raise OutcomeUnknownError("the connection failed during a write")

    monkeypatch.setattr(store._db, "alone", once_lost)


async def _counts(store: PostgresTaskStore, task_id: TaskId) -> list[int]:
    clock = FakeClock()
    task = await store.get(task_id, clock.now())
    _, entries = await store.history(task_id, clock.now()) or (None, [])
    return [0 if task is None else 1, len(entries)]


async def test_a_create_that_landed_before_its_connection_was_lost_is_found(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    task = TaskManager(store, clock=clock).draft("job", {"n": 1})
    _lost_after(store, monkeypatch, ran=True)
    sent = postgres.statements_sent(monkeypatch)
    assert await store.create(task, clock.now()) == (task, True)
    assert sent == ["WITH", "WITH", "SELECT"]  # the create, again (nothing written), read
    assert await _counts(store, task.id) == [1, 1]


async def test_an_unknown_create_whose_id_holds_another_task_is_refused(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    manager = TaskManager(store, clock=clock)
    other = await manager.create("job", {"n": 1})
    _lost_after(store, monkeypatch, ran=False)
    with pytest.raises(PersistenceError, match="another task's") as raised:
        await store.create(other.model_copy(update={"name": "mine"}), clock.now())
    assert not isinstance(raised.value, OutcomeUnknownError)
    assert await store.get(other.id, clock.now()) == other
    assert await _counts(store, other.id) == [1, 1]


async def test_a_create_stays_unknown_while_the_store_is_unreachable(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    task = TaskManager(store, clock=clock).draft("job")
    lost = OutcomeUnknownError("the connection failed during a write")

    async def unreachable(work: Any) -> Any:
        if lost.__traceback__ is None:
            raise lost
        raise DatabaseUnavailableError("no connection")

    monkeypatch.setattr(store._db, "alone", unreachable)
    with pytest.raises(OutcomeUnknownError) as raised:
        await store.create(task, clock.now())
    assert raised.value is lost
    assert isinstance(raised.value.__cause__, DatabaseUnavailableError)


async def test_a_create_the_server_refuses_wrote_neither_row(store: PostgresTaskStore) -> None:
    failure, written = await _insert_held(store, "pg_cancel_backend")
    assert failure is not None
    assert not isinstance(failure, OutcomeUnknownError), failure
    assert "canceling statement" in str(failure)
    assert written == 0


async def test_a_create_of_an_id_taken_wrote_nothing(store: PostgresTaskStore) -> None:
    clock = FakeClock()
    manager = TaskManager(store, clock=clock)
    task = await manager.create("job")
    with pytest.raises(PersistenceError):
        await store.create(task.model_copy(update={"name": "other"}), clock.now())
    assert await store.get(task.id, clock.now()) == task
    _, entries = await store.history(task.id, clock.now()) or (None, [])
    assert len(entries) == 1
