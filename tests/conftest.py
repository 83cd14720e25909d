"""Shared fixtures: the anyio backend, a task store of every kind, and a check that no
test leaves the logging configured."""

import logging
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


@pytest.fixture(autouse=True)
def logging_left_as_found() -> Iterator[None]:
    """Fail a test that leaves the root logger with a handler or a level it did not have:
    a handler bound to the test's captured stderr outlives the test, and every later
    record, from any thread (aiosqlite's, say), becomes a "Logging error" on a closed
    file. The root logger is given back its handlers and level first."""
    root = logging.getLogger()
    handlers, level = _own_handlers(root), root.level
    yield
    left = [handler for handler in _own_handlers(root) if handler not in handlers]
    gone = [handler for handler in handlers if handler not in root.handlers]
    if not left and not gone and root.level == level:
        return
    now, was = logging.getLevelName(root.level), logging.getLevelName(level)
    message = f"the test left the root logger changed: added {left}, removed {gone}, "
    message += f"level {now} (was {was})"
    for handler in left:
        root.removeHandler(handler)
    for handler in gone:
        root.addHandler(handler)
    root.setLevel(level)
    pytest.fail(message, pytrace=False)


def _own_handlers(root: logging.Logger) -> list[logging.Handler]:
    """The root logger's handlers but pytest's (a new set for each phase of a test)."""
    return [h for h in root.handlers if not type(h).__module__.startswith("_pytest.")]


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
