"""Fixtures of the integration tests: a private PostgreSQL schema, dropped after."""

from collections import defaultdict
from collections.abc import AsyncIterator

import pytest

from taskloom.engine.manager import TaskManager
from taskloom.persistence.postgres import PostgresSettings
from tests import postgres

Heard = dict[int, list[tuple[str, str | None]]]
"""The changes each manager was told of by its store's notifications, by ``id(manager)``."""


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    """The name of a new, empty schema on the test server (skips without one)."""
    postgres.require_server()
    name = postgres.new_schema_name()
    yield name
    await postgres.drop_schema(name)


@pytest.fixture
def database(schema: str) -> PostgresSettings:
    """Settings of a store on :func:`schema`."""
    return PostgresSettings(url=postgres.TEST_URL, schema_name=schema)


@pytest.fixture
def heard(monkeypatch: pytest.MonkeyPatch) -> Heard:
    """Every notification each manager of this process receives (before any filter)."""
    told: Heard = defaultdict(list)
    original = TaskManager.notice

    async def notice(self: TaskManager, task_id: str, state: str | None = None) -> None:
        told[id(self)].append((task_id, state))
        await original(self, task_id, state)

    monkeypatch.setattr(TaskManager, "notice", notice)
    return told
