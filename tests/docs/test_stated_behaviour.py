"""What docs/protocol-support.md and docs/server.md say about retention and about what
``tasks/result`` answers is what the code does (ADR 0040): each statement is read from
the page and checked against the settings' defaults or a real exchange."""

import re
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from mcp.shared.memory import create_client_server_memory_streams

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.manager import TaskManagerSettings
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.server import ServerSettings, TaskServer
from tests.server.client import TASK_META, LegacyClient, open_client

DOCS = Path(__file__).resolve().parents[2] / "docs"
DAY_MS = 24 * 3_600_000
RELATED = "io.modelcontextprotocol/related-task"


def _page(name: str) -> str:
    return " ".join((DOCS / name).read_text(encoding="utf-8").split())  # one line


def test_the_retention_the_docs_state_is_the_default_and_the_cap() -> None:
    settings = TaskManagerSettings()
    assert settings.default_ttl_ms is not None
    assert settings.max_ttl_ms is not None
    default_days, max_days = settings.default_ttl_ms // DAY_MS, settings.max_ttl_ms // DAY_MS
    support = _page("protocol-support.md")
    row = re.search(
        r"\| retention \| `ttl` from creation, default (\d+) days, at most (\d+) days", support
    )
    assert row is not None, "docs/protocol-support.md: the retention row"
    assert (int(row[1]), int(row[2])) == (default_days, max_days)
    server = _page("server.md")
    said = re.search(r"capped at (\d+) days; the default is (\d+) days", server)
    assert said is not None, "docs/server.md: the Retention paragraph"
    assert (int(said[2]), int(said[1])) == (default_days, max_days)
    example = re.search(r'"ttlMs": (\d+)', server)
    assert example is not None
    assert int(example[1]) == settings.default_ttl_ms


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[LegacyClient]:
    settings = TaskloomSettings(
        database=SqliteSettings(path=tmp_path / "t.db", synchronous="NORMAL"),
        load_entry_points=False,
        run_sweeper=False,
    )
    async with open_engine(settings) as engine:
        server = TaskServer(engine.manager, engine.workflows, ServerSettings(recheck_s=None))
        async with (
            create_client_server_memory_streams() as (client_streams, server_streams),
            anyio.create_task_group() as group,
        ):
            group.start_soon(lambda: server.serve(*server_streams))
            async with open_client(*client_streams) as connected:
                yield connected
            group.cancel_scope.cancel()


async def test_tasks_result_answers_what_the_docs_say(client: LegacyClient) -> None:
    stated = (
        "`tasks/result`: waits until the task ends and answers its result: the plain call's "
        "answer without its last text block `(task <id>: <status>)` and without "
        '`_meta["taskloom/task"]`, with `_meta["io.modelcontextprotocol/related-task"]`'
    )
    assert stated in _page("server.md")
    arguments = {"start": 4, "tick_s": 0}
    task_id = await client.start("countdown", arguments)
    result = await client.result(task_id)
    plain = await client.call("countdown", arguments)
    plain_id = plain["_meta"][TASK_META]["taskId"]
    assert plain["content"][:-1] == result["content"]
    assert plain["content"][-1] == {"type": "text", "text": f"(task {plain_id}: completed)"}
    assert plain["structuredContent"] == result["structuredContent"]
    assert TASK_META not in result["_meta"]
    assert result["_meta"][RELATED] == {"taskId": task_id}
