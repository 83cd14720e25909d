"""Fixtures of the integration tests: a private PostgreSQL schema, dropped after."""

from collections.abc import AsyncIterator

import pytest

from taskloom.persistence.postgres import PostgresSettings
from tests import postgres


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
