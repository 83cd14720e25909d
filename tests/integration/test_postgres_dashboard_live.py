"""A live dashboard page on PostgreSQL hears another process's changes (the hub reads
them while a page is open, and only then: tests/dashboard/test_parts.py)."""

from collections.abc import AsyncIterator

import anyio
import httpx2

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.persistence.postgres import PostgresSettings
from taskloom.server import ServerSettings, TaskServer
from taskloom.workflows.countdown import countdown
from tests.server.http_support import ANN
from tests.server.test_http_dashboard import serving_ui


async def _until(lines: AsyncIterator[str], wanted: str) -> list[str]:
    seen: list[str] = []
    async for line in lines:
        seen.append(line)
        if line == wanted:
            return seen
    return seen


async def test_an_open_page_hears_a_change_made_by_another_process(
    database: PostgresSettings,
) -> None:
    settings = TaskloomSettings(database=database, load_entry_points=False, run_sweeper=False)
    quiet = settings.model_copy(update={"run_worker": False})
    async with (
        open_engine(quiet) as here,
        open_engine(quiet) as elsewhere,
        httpx2.AsyncClient(timeout=10) as http,
    ):
        server = TaskServer(here.manager, here.workflows, ServerSettings(recheck_s=None))
        async with serving_ui(here, server) as base:
            task = await elsewhere.manager.create(countdown.name, {"start": 1}, owner="ann")
            headers = {"Authorization": f"Bearer {ANN}"}
            url = f"{base}/ui/tasks/{task.id}/events"
            with anyio.fail_after(10):
                async with http.stream("GET", url, headers=headers) as events:
                    lines = events.aiter_lines()
                    assert await anext(lines) == "retry: 2000"
                    await elsewhere.manager.cancel(task.id, reason="from another process")
                    received = await _until(lines, "event: end")
    assert "event: end" in received
