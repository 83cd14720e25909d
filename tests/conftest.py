"""Shared fixtures: the anyio backend and a task store of every kind."""

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from taskloom.engine.manager import TaskManager
from taskloom.engine.ports import TaskStore
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.testing import FakeClock, InMemoryTaskStore
from tests import postgres

STORE_KINDS = ("memory", "sqlite", "postgres")


@pytest.fixture(scope="session", autouse=True)
def _start_up_never_frozen() -> None:
    """The commands run in-process (``taskloom run``, ``worker``) would freeze this
    process's start-up and every test's garbage left by then (ADR 0061): not here."""
    from taskloom import bootstrap

    bootstrap._frozen = True


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """aiosqlite is asyncio-only, so every async test runs on asyncio."""
    return "asyncio"


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    """A fresh, empty store of each kind (SQLite in a new file, PostgreSQL emptied)."""
    if request.param == "memory":
        yield InMemoryTaskStore()
    elif request.param == "sqlite":
        async with SqliteTaskStore.open(tmp_path / "tasks.db") as sqlite_store:
            yield sqlite_store
    else:
        schema = request.getfixturevalue("postgres_schema")
        async with postgres.emptied_store(schema) as postgres_store:
            yield postgres_store


@pytest.fixture(scope="session")
def postgres_schema() -> Iterator[str]:
    """One schema of the test server for the session's contract tests, dropped at the end."""
    postgres.require_server()
    name = postgres.new_schema_name()
    yield name
    postgres.drop_schema_now(name)


@pytest.fixture
def clock() -> FakeClock:
    """A clock that moves only when a test says so."""
    return FakeClock()


@pytest.fixture
def manager(store: TaskStore, clock: FakeClock) -> TaskManager:
    """A TaskManager over each kind of store, on the fake clock."""
    return TaskManager(store, clock=clock)
