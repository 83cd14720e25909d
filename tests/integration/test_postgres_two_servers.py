"""Two real ``taskloom serve --db postgresql://...`` processes on one database, driven over
stdio by the SDK's client: a task created through one server is read, listed, awaited and
cancelled through the other.

``serve`` keeps its tables in the default schema, so the test gets a database of its own
(created here, dropped with ``FORCE`` afterwards)."""

import secrets
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import psycopg
import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from psycopg import sql

from tests import postgres
from tests.helpers import checkout_env, eventually
from tests.server.client import LegacyClient, open_client

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def database_url() -> Iterator[str]:
    """The URL of a new, empty database on the test server; dropped afterwards."""
    postgres.require_server()
    name = f"taskloom_{secrets.token_hex(6)}"
    with psycopg.connect(postgres.TEST_URL, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlunsplit(urlsplit(postgres.TEST_URL)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(postgres.TEST_URL, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@asynccontextmanager
async def serving(url: str, errlog: Path) -> AsyncIterator[LegacyClient]:
    """A client of ``python -m taskloom serve --db URL`` (it runs a worker too)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "taskloom", "serve", "--db", url],
        env=checkout_env({}, TASKLOOM_WORKFLOWS="tests.server.flows"),
        cwd=ROOT,
    )
    with errlog.open("a") as log:
        async with (
            stdio_client(params, errlog=log) as streams,
            open_client(*streams) as client,
        ):
            yield client


async def _status(client: LegacyClient, task_id: str) -> str:
    status: str = (await client.get(task_id))["status"]
    return status


async def _listed(client: LegacyClient) -> set[str]:
    ids: set[str] = set()
    cursor: str | None = None
    while True:
        page = await client.list_tasks(cursor)
        ids |= {task["taskId"] for task in page["tasks"]}
        cursor = page.get("nextCursor")
        if cursor is None:
            return ids


async def test_a_task_started_on_one_server_is_answered_for_by_the_other(
    database_url: str, tmp_path: Path
) -> None:
    errlog = tmp_path / "stderr.log"
    with anyio.fail_after(90):
        async with AsyncExitStack() as stack:
            a = await stack.enter_async_context(serving(database_url, errlog))
            b = await stack.enter_async_context(serving(database_url, errlog))

            done = await a.start("countdown", {"start": 4, "tick_s": 0})
            slow = await a.start("countdown", {"start": 400, "tick_s": 0.05})
            assert await _status(b, done) in {"working", "completed"}
            assert {done, slow} <= await _listed(b)

            result = await b.result(done)  # waits for the end, wherever the run happens
            assert result["structuredContent"] == {"counted": 4, "lanes": 4}
            assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": done}
            assert await a.result(done) == result
            assert await _status(a, done) == await _status(b, done) == "completed"

            async def counting() -> bool:  # a worker (either server's) is running it
                message = (await a.get(slow)).get("statusMessage", "")
                return str(message).startswith("phase 2/3 count")

            await eventually(counting, within_s=30, every_s=0.05)
            assert (await b.cancel(slow))["status"] == "cancelled"
            assert await _status(a, slow) == "cancelled"
            with pytest.raises(MCPError) as raised:
                await a.result(slow)
            assert raised.value.error.data == {"taskId": slow, "status": "cancelled"}

            unknown = await b.error("tasks/get", {"taskId": "no-such-task"})
            assert "no-such-task" in unknown.message
    assert "Traceback" not in errlog.read_text()
