"""What only the PostgreSQL store has: a server to reach, a schema to own, and many
processes (here: several pools) sharing one database."""

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import sql

from taskloom.engine.errors import (
    DatabaseUnavailableError,
    ForeignDatabaseError,
    LeaseLostError,
    PersistenceError,
    SchemaVersionError,
    StoreClosedError,
)
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import TaskId
from taskloom.engine.runs import ClaimedRun, NodeStart
from taskloom.engine.states import TaskState
from taskloom.persistence.postgres import PostgresSettings, PostgresTaskStore, schema
from taskloom.testing import FakeClock
from tests import postgres

pytestmark = pytest.mark.usefixtures("server")

LEASE = timedelta(seconds=30)


@pytest.fixture(scope="module")
def server() -> str:
    return postgres.require_server()


@pytest.fixture
def schema_name() -> str:
    return postgres.new_schema_name()


@pytest.fixture
async def dropped_afterwards(schema_name: str) -> AsyncIterator[str]:
    """A schema name for the test; the schema is dropped after it."""
    yield schema_name
    await postgres.drop_schema(schema_name)


async def _sql(statement: sql.Composed) -> None:
    async with await psycopg.AsyncConnection.connect(
        postgres.TEST_URL, autocommit=True
    ) as connection:
        await connection.execute(statement)


def _settings(schema_name: str, **overrides: object) -> PostgresSettings:
    return PostgresSettings(url=postgres.TEST_URL, schema_name=schema_name, **overrides)


# -- reaching the server ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("postgresql://postgres@127.0.0.1:1/postgres", "Connection refused"),
        ("postgresql://no_such_role@127.0.0.1:5432/postgres", 'role "no_such_role" does not exist'),
        ("postgresql://postgres@127.0.0.1:5432/no_such_db", 'database "no_such_db" does not exist'),
        ("postgresql://postgres@no-such-host.invalid/postgres", "no-such-host.invalid"),
    ],
)
async def test_a_server_that_refuses_us_is_one_clear_line(url: str, reason: str) -> None:
    if "5432" in url and postgres.TEST_URL != postgres.DEFAULT_URL:
        pytest.skip("these URLs name the default local server")
    with pytest.raises(DatabaseUnavailableError) as caught:
        async with PostgresTaskStore.open(PostgresSettings(url=url, connect_timeout_s=5)):
            pass
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("cannot connect to PostgreSQL ")
    assert reason in message
    assert isinstance(caught.value.__cause__, psycopg.Error)


async def test_the_password_never_appears_in_a_message() -> None:
    url = "postgresql://someone:s3cret-pw@127.0.0.1:1/postgres"
    with pytest.raises(DatabaseUnavailableError) as caught:
        async with PostgresTaskStore.open(url):
            pass
    assert "s3cret-pw" not in str(caught.value)
    assert "someone@127.0.0.1:1/postgres" in str(caught.value)


def test_the_password_is_not_in_the_settings_repr() -> None:
    settings = PostgresSettings(url="postgresql://someone:s3cret-pw@db/tasks")
    assert "s3cret-pw" not in repr(settings)
    assert "s3cret-pw" not in str(settings)


@pytest.mark.parametrize("url", ["postgresql://[broken", "postgresql://h/db?no_such_option=1"])
async def test_a_malformed_url_is_one_clear_line(url: str) -> None:
    with pytest.raises(PersistenceError, match=r"^invalid PostgreSQL URL: ") as caught:
        async with PostgresTaskStore.open(url):
            pass
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"url": "mysql://x/y"}, "url"),
        ({"schema_name": "Bad-Name"}, "schema_name"),
        ({"schema_name": ""}, "schema_name"),
        ({"min_connections": 5, "max_connections": 2}, "min_connections cannot exceed"),
    ],
)
def test_bad_settings_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PostgresSettings(**{"url": postgres.TEST_URL, **fields})


# -- the schema ---------------------------------------------------------------------------


async def test_a_new_schema_is_created_migrated_and_kept_across_reopens(
    dropped_afterwards: str,
) -> None:
    clock = FakeClock()
    async with PostgresTaskStore.open(_settings(dropped_afterwards)) as store:
        task = await TaskManager(store, clock=clock).create("job", {"n": 1})
    async with PostgresTaskStore.open(_settings(dropped_afterwards)) as store:
        assert await store.get(task.id, clock.now()) == task
    async with await psycopg.AsyncConnection.connect(postgres.TEST_URL) as connection:
        cursor = await connection.execute(
            sql.SQL("SELECT version FROM {}.{} ORDER BY version").format(
                sql.Identifier(dropped_afterwards), sql.Identifier(schema.VERSION_TABLE)
            )
        )
        versions = [version for (version,) in await cursor.fetchall()]
    assert versions == list(range(1, schema.latest_version() + 1))


async def test_a_newer_schema_is_refused_and_left_alone(dropped_afterwards: str) -> None:
    async with PostgresTaskStore.open(_settings(dropped_afterwards)):
        pass
    newer = schema.latest_version() + 1
    table = sql.Identifier(dropped_afterwards, schema.VERSION_TABLE)
    await _sql(sql.SQL("INSERT INTO {} (version) VALUES ({})").format(table, newer))
    with pytest.raises(SchemaVersionError, match=f"schema version {newer}, newer than") as caught:
        async with PostgresTaskStore.open(_settings(dropped_afterwards)):
            pass
    assert "\n" not in str(caught.value)


async def test_another_applications_schema_is_refused_and_left_alone(
    dropped_afterwards: str,
) -> None:
    name = sql.Identifier(dropped_afterwards)
    await _sql(sql.SQL("CREATE SCHEMA {}").format(name))
    await _sql(sql.SQL("CREATE TABLE {}.users (id int)").format(name))
    with pytest.raises(ForeignDatabaseError, match="another application"):
        async with PostgresTaskStore.open(_settings(dropped_afterwards)):
            pass
    async with await psycopg.AsyncConnection.connect(postgres.TEST_URL) as connection:
        cursor = await connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (dropped_afterwards,),
        )
        assert await cursor.fetchall() == [("users",)]


async def test_processes_opening_a_new_schema_at_once_migrate_it_once(
    dropped_afterwards: str,
) -> None:
    opened: list[bool] = []

    async def open_one() -> None:
        async with PostgresTaskStore.open(_settings(dropped_afterwards)):
            opened.append(True)

    async with anyio.create_task_group() as task_group:
        for _ in range(4):
            task_group.start_soon(open_one)
    assert len(opened) == 4


# -- failures after opening ---------------------------------------------------------------


async def test_a_driver_error_becomes_a_persistence_error_with_its_cause(
    dropped_afterwards: str,
) -> None:
    clock = FakeClock()
    async with PostgresTaskStore.open(_settings(dropped_afterwards)) as store:
        await _sql(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(dropped_afterwards)))
        with pytest.raises(PersistenceError, match="tasks") as caught:
            await store.get(TaskId("x" * 24), clock.now())
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value.__cause__, psycopg.Error)


async def test_a_closed_store_says_so(dropped_afterwards: str) -> None:
    async with PostgresTaskStore.open(_settings(dropped_afterwards)) as store:
        pass
    with pytest.raises(StoreClosedError):
        await store.get(TaskId("x" * 24), FakeClock().now())


async def test_an_error_inside_the_open_store_comes_out_as_itself(
    dropped_afterwards: str,
) -> None:
    """The store runs its node-write senders in a task group of its own (ADR 0052); an
    error of the code using it is not wrapped in that group's exception group."""
    with pytest.raises(LeaseLostError):
        async with PostgresTaskStore.open(_settings(dropped_afterwards)):
            raise LeaseLostError("raised by the store's user")


async def test_a_node_write_once_the_store_closed_says_so(dropped_afterwards: str) -> None:
    clock = FakeClock()
    async with PostgresTaskStore.open(_settings(dropped_afterwards)) as store:
        (claimed,) = await postgres.claimed_jobs(store, clock, lease_for=LEASE)
    with pytest.raises(StoreClosedError):
        await store.start_node(claimed.lease, NodeStart(node="a", attempt=1), clock.now())


async def test_a_node_write_shielded_while_everything_around_the_store_stops_lands(
    dropped_afterwards: str,
) -> None:
    """A cancel of the scope around the open store (a SIGTERM) does not stop its senders
    before its block ends: a node's end its user records in a shielded scope meanwhile
    (the runner does) is written, as it was before the senders (ADR 0052)."""
    clock = FakeClock()
    settings = _settings(dropped_afterwards)
    with anyio.fail_after(20), anyio.CancelScope() as everything:
        async with PostgresTaskStore.open(settings) as store:
            (claimed,) = await postgres.claimed_jobs(store, clock, lease_for=LEASE)
            everything.cancel()
            with anyio.CancelScope(shield=True):
                await store.start_node(claimed.lease, NodeStart(node="a", attempt=1), clock.now())
    async with PostgresTaskStore.open(settings) as store:
        assert list(await store.checkpoints(claimed.task.id)) == ["a"]


# -- many processes on one database (each store is a pool of its own) ---------------------


async def test_concurrent_claims_from_many_pools_take_each_run_once(
    dropped_afterwards: str,
) -> None:
    clock = FakeClock()
    settings = _settings(dropped_afterwards, max_connections=4)
    async with (
        PostgresTaskStore.open(settings) as first,
        PostgresTaskStore.open(settings) as second,
    ):
        manager = TaskManager(first, clock=clock)
        created = {(await manager.create("job")).id for _ in range(60)}
        claims: dict[str, list[TaskId]] = {}

        async def claim_all(store: PostgresTaskStore, worker: str) -> None:
            mine = claims.setdefault(worker, [])
            while True:
                claimed = await store.claim_runs(
                    worker=worker,
                    workflows=frozenset({"job"}),
                    now=clock.now(),
                    lease_for=LEASE,
                    limit=3,
                    start=claim_start(manager.clock.now()),
                )
                if not claimed:
                    return
                mine.extend(run.task.id for run in claimed)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as task_group:
                for index in range(6):
                    task_group.start_soon(claim_all, (first, second)[index % 2], f"w{index}")
        every_claim = [task_id for ids in claims.values() for task_id in ids]
        assert sorted(every_claim) == sorted(created)
        assert all(
            task.state is TaskState.RUNNING for task in (await manager.list(limit=100)).tasks
        )


async def test_a_lease_taken_over_by_another_process_fences_the_first(
    dropped_afterwards: str,
) -> None:
    clock = FakeClock()
    settings = _settings(dropped_afterwards)
    async with (
        PostgresTaskStore.open(settings) as first,
        PostgresTaskStore.open(settings) as second,
    ):
        manager = TaskManager(first, clock=clock)
        task = await manager.create("job")

        async def claim(store: PostgresTaskStore, worker: str) -> list[ClaimedRun]:
            return list(
                await store.claim_runs(
                    worker=worker,
                    workflows=frozenset({"job"}),
                    now=clock.now(),
                    lease_for=timedelta(seconds=1),
                    limit=1,
                    start=claim_start(manager.clock.now()),
                )
            )

        (old,) = await claim(first, "old")
        assert await claim(second, "new") == []
        clock.advance(2)
        (new,) = await claim(second, "new")
        assert new.resumed
        with pytest.raises(LeaseLostError):
            await manager.report_progress(task.id, completed=1, lease=old.lease)
        done = await TaskManager(second, clock=clock).complete(task.id, "ok", lease=new.lease)
        assert done.result == "ok"


async def test_one_idempotency_key_across_pools_makes_one_task(dropped_afterwards: str) -> None:
    clock = FakeClock()
    settings = _settings(dropped_afterwards)
    async with (
        PostgresTaskStore.open(settings) as first,
        PostgresTaskStore.open(settings) as second,
    ):
        managers = [TaskManager(store, clock=clock) for store in (first, second)]
        ids: set[str] = set()

        async def create(manager: TaskManager) -> None:
            ids.add((await manager.create("job", {"n": 1}, idempotency_key="once")).id)

        async with anyio.create_task_group() as task_group:
            for index in range(20):
                task_group.start_soon(create, managers[index % 2])
        assert len(ids) == 1


async def test_the_fenced_write_that_ends_a_run_drops_its_lease(dropped_afterwards: str) -> None:
    """A worker killed between writing the result and releasing the lease leaves no lease
    row behind: the result and the release commit together."""
    clock = FakeClock()
    async with PostgresTaskStore.open(_settings(dropped_afterwards)) as store:
        manager = TaskManager(store, clock=clock)
        task = await manager.create("job")
        (run,) = await store.claim_runs(
            worker="w",
            workflows=frozenset({"job"}),
            now=clock.now(),
            lease_for=LEASE,
            limit=1,
            start=claim_start(manager.clock.now()),
        )
        await manager.report_progress(task.id, completed=1, lease=run.lease)
        assert await _leases(dropped_afterwards) == 1
        await manager.complete(task.id, "ok", lease=run.lease)
        assert await _leases(dropped_afterwards) == 0
        await store.release_lease(run.lease)  # what the worker does next: a no-op now


async def _leases(schema_name: str) -> int:
    async with await psycopg.AsyncConnection.connect(postgres.TEST_URL) as connection:
        cursor = await connection.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema_name, "leases"))
        )
        (count,) = await cursor.fetchone() or (0,)
        return int(count)


async def test_bookkeeping_commits_without_waiting_for_its_wal_flush_and_the_rest_waits(
    postgres_schema: str,
) -> None:
    async with postgres.emptied_store(postgres_schema) as store:
        db = store._db

        async def level(connection: Any) -> str:
            cursor = await connection.execute("SHOW synchronous_commit")
            row = await cursor.fetchone()
            return str(row[0])

        assert await db.transaction(level, durable=False) == "off"
        assert await db.transaction(level) == "on"  # SET LOCAL ended with its transaction
