"""The dashboard's task list at a million tasks (issue 18, ADR 0030).

One SQLite file (``synchronous=FULL``, schema 6) seeded with 1,000,000 tasks by direct
inserts (10 principals, five workflows, creation times spread over 30 days, 70 %
completed, 15 % failed, 10 % cancelled, the rest queued or running). Then, for one
principal (100,000 tasks, all of one workflow), the latency of one page of the list as
the dashboard asks for it (a keyset page of 50, plus the counts by state): the newest
page, the page after 200 others (by its cursor), filtered by state, by its workflow, by
a workflow it never ran (nothing to find: the worst case), by the last 24 hours, and an
id-prefix search; the counts of every owner's tasks (an operator's ``taskloom ui``); and
one whole ``GET /ui/`` through the ASGI app (templates included).

Target: every page under 100 ms at the median (a page of an OFFSET-paged list would
read every row before it: tens of seconds at this depth).
"""

import json
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import anyio
import httpx2

import figures
from taskloom.engine.manager import ANY_OWNER, TaskManager
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.persistence.sqlite.rows import INSERT_SQL, micros
from taskloom.server.dashboard.access import Access, Viewer
from taskloom.server.dashboard.context import Dashboard
from taskloom.server.dashboard.hub import ChangeHub
from taskloom.server.dashboard.listing import Filters, listing
from taskloom.server.dashboard.mount import ui_app
from taskloom.server.http import HttpSettings
from taskloom.server.http.authentication import Authenticator

Row = figures.Row
TASKS: Final = 1_000_000
OWNERS: Final = 10
WORKFLOWS: Final = ("ingest", "report", "audit", "deploy", "crawl")
TOKEN: Final = "bench-token-0000000001"
TARGET: Final = "< 100"
SAMPLES: Final = 15
NOW: Final = datetime.now(UTC)


def _state(number: int) -> TaskState:
    bucket = number % 20
    if bucket < 14:
        return TaskState.COMPLETED
    if bucket < 17:
        return TaskState.FAILED
    if bucket < 19:
        return TaskState.CANCELLED
    return TaskState.RUNNING if number % 40 == 19 else TaskState.QUEUED


def _seed(path: Path, count: int) -> None:
    """*count* tasks, oldest first, inserted in batches in one connection."""
    span = timedelta(days=30) / count
    start = NOW - timedelta(days=30)
    raw = sqlite3.connect(path)
    try:
        raw.execute("PRAGMA synchronous = OFF")
        for first in range(0, count, 50_000):
            batch = []
            for number in range(first, min(first + 50_000, count)):
                created = start + span * number
                state = _state(number)
                stamp = created.isoformat().replace("+00:00", "Z")
                body = {
                    "id": f"t{number:09d}x{number * 7919 % 1_000_003:07d}",
                    "name": WORKFLOWS[number % len(WORKFLOWS)],
                    "arguments": {"n": number},
                    "owner": f"p{number % OWNERS}",
                    "state": state.value,
                    "status_message": f"{state.value} after {number % 9} nodes",
                    "created_at": stamp,
                    "updated_at": stamp,
                    "ttl_ms": None,
                    "version": 1,
                }
                batch.append(
                    (
                        body["id"],
                        body["name"],
                        body["owner"],
                        state.value,
                        1,
                        micros(created),
                        None,
                        None,
                        None,
                        micros(created),
                        None,  # workflow_version (schema 8)
                        json.dumps(body),
                    )
                )
            with raw:
                raw.executemany(INSERT_SQL, batch)
    finally:
        raw.close()


async def _timed(call: Callable[[], Awaitable[Any]], samples: int) -> list[float]:
    await call()  # warm the page cache and the statement cache
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def _measure(path: Path, samples: int) -> list[Row]:
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store)
        dashboard_viewer = Viewer("p3", "p3", "", False, True, False)
        operator = Viewer(ANY_OWNER, "operator", "", False, True, False)
        hub = ChangeHub()
        access = Access(None, allow_actions=False, operator=False)
        dashboard = Dashboard(manager, store, {}, access, hub)
        cursor = None
        for _ in range(200):
            deeper = await manager.list(owner="p3", cursor=cursor, limit=50)
            cursor = deeper.next_cursor
        newest = await manager.list(owner="p3", limit=1)
        prefix = newest.tasks[0].id[:6]

        def page(viewer: Viewer = dashboard_viewer, **filters: Any) -> Callable[[], Awaitable[Any]]:
            return lambda: listing(dashboard, viewer, Filters(**filters))

        cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("newest page of one principal (100,000 tasks)", page()),
            ("page 201 by its cursor", page(cursor=cursor)),
            ("filtered: failed", page(state=TaskState.FAILED)),
            ("filtered: one workflow", page(workflow="deploy")),
            ("filtered: a workflow it never ran (an empty page)", page(workflow="audit")),
            ("filtered: created in the last 24 hours", page(since="24h")),
            ("search: an id prefix", page(search=prefix)),
            ("every owner's list and counts (operator, 1,000,000)", page(operator)),
        ]
        rows = [figures.latency(name, await _timed(call, samples), TARGET) for name, call in cases]
        app = ui_app(
            manager,
            store,
            {},
            hub,
            authenticator=Authenticator(HttpSettings(tokens={TOKEN: "p3"})),
        )
        transport = httpx2.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(transport=transport, base_url="http://b") as http:

            async def whole() -> None:
                response = await http.get("/ui/", headers=headers)
                assert response.status_code == 200

            rows.append(
                figures.latency(
                    "GET /ui/ through ASGI (rendered)", await _timed(whole, samples), TARGET
                )
            )
        return rows


def run(quick: bool) -> list[Row]:
    """The list's latencies; *quick* seeds 20,000 tasks and samples each page 3 times."""
    count = 20_000 if quick else TASKS
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "dashboard.db"
        anyio.run(_create, path)
        started = time.perf_counter()
        _seed(path, count)
        seeded_s = time.perf_counter() - started
        rows = anyio.run(_measure, path, 3 if quick else SAMPLES)
    for found in rows:
        found["note"] += f"; {count:,} tasks (seeded in {seeded_s:.0f} s)"
    return rows


async def _create(path: Path) -> None:
    async with SqliteTaskStore.open(path):
        pass
