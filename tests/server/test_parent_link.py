"""A child workflow's Task names its parent in ``_meta["io.taskloom/parentTaskId"]`` on
both generations (ADR 0026): ``tasks/list`` and ``tasks/get`` on 2025-11-25, ``tasks/get``
on 2026-07-28; a task with no parent carries no such key."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from taskloom.bootstrap import Engine, open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.server.wire import PARENT_TASK_META_KEY
from taskloom.testing import FakeClock
from tests.helpers import eventually
from tests.server import flows
from tests.server.client import LegacyClient
from tests.server.modern_client import ModernClient


class GateInput(BaseModel):
    gate: str


kid = Workflow("kid", version="1", input=GateInput, description="Wait on a gate.")


@kid.node()
async def wait_for_gate(ctx: NodeContext[GateInput]) -> str:
    await flows.gate(ctx.input.gate).wait()
    return f"kid passed {ctx.input.gate}"


family = Workflow("family", version="1", input=GateInput, description="Start a kid.")


@family.node()
async def start_kid(ctx: NodeContext[GateInput]) -> str:
    result = await ctx.child(kid, {"gate": ctx.input.gate})
    assert isinstance(result, str)
    return result


@pytest.fixture
async def engine(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Engine]:
    """The server tests' engine, serving the two workflows above."""
    settings = TaskloomSettings(
        database=SqliteSettings(path=tmp_path / "tasks.db", synchronous="NORMAL"),
        worker=WorkerSettings(poll_s=0.05, progress_interval_s=0),
        workflow_modules=(),
        load_entry_points=False,
        run_sweeper=False,
    )
    registry = WorkflowRegistry({kid.name: kid, family.name: family})
    async with open_engine(settings, clock=clock, workflows=registry) as opened:
        yield opened


async def _listed_child(client: LegacyClient, parent_id: str) -> dict[str, Any]:
    """The parent's child as ``tasks/list`` shows it, once it exists (bounded)."""
    listed: list[dict[str, Any]] = []

    async def two() -> bool:
        nonlocal listed
        listed = (await client.list_tasks())["tasks"]
        return len(listed) == 2

    await eventually(two)
    (child,) = [task for task in listed if task["taskId"] != parent_id]
    (parent,) = [task for task in listed if task["taskId"] == parent_id]
    assert "_meta" not in parent
    return child


async def test_a_child_names_its_parent_in_tasks_list_and_tasks_get_on_2025_11_25(
    client: LegacyClient,
) -> None:
    parent_id = await client.start("family", {"gate": "legacy"})
    child = await _listed_child(client, parent_id)
    assert child["_meta"] == {PARENT_TASK_META_KEY: parent_id}
    assert child["status"] == "working"
    got = await client.get(child["taskId"])
    assert got["_meta"] == {PARENT_TASK_META_KEY: parent_id}
    assert "_meta" not in await client.get(parent_id)

    flows.gate("legacy").set()
    result = await client.result(parent_id)
    assert result["content"][0]["text"] == "kid passed legacy"
    ended = await client.get(child["taskId"])
    assert (ended["status"], ended["_meta"]) == ("completed", {PARENT_TASK_META_KEY: parent_id})


async def test_a_child_names_its_parent_in_tasks_get_on_2026_07_28(
    client: LegacyClient, modern: ModernClient
) -> None:
    parent_id = await modern.start("family", {"gate": "modern"})
    child = await _listed_child(client, parent_id)  # 2026 has no tasks/list: found here
    got = await modern.get(child["taskId"])  # the SDK adds its serverInfo to _meta
    assert got["_meta"][PARENT_TASK_META_KEY] == parent_id
    assert got["status"] == "working"
    assert PARENT_TASK_META_KEY not in (await modern.get(parent_id)).get("_meta", {})

    flows.gate("modern").set()
    done = await modern.until(parent_id)
    assert done["status"] == "completed"
    ended = await modern.until(child["taskId"])
    assert (ended["status"], ended["_meta"][PARENT_TASK_META_KEY]) == ("completed", parent_id)
    assert ended["result"]["content"][0]["text"] == "kid passed modern"


async def test_a_childs_notifications_name_its_parent_next_to_the_subscription(
    client: LegacyClient, modern: ModernClient
) -> None:
    parent_id = await modern.start("family", {"gate": "listen"})
    child_id = (await _listed_child(client, parent_id))["taskId"]

    async def listen() -> None:
        params = {"notifications": {"taskIds": [child_id]}}
        await modern.request("subscriptions/listen", params)

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(listen)
        await modern.tap.until(lambda: bool(modern.notifications("notifications/tasks")))
        flows.gate("listen").set()
    frames = modern.notifications("notifications/tasks")
    assert frames[-1]["status"] == "completed"
    for frame in frames:
        assert frame["_meta"][PARENT_TASK_META_KEY] == parent_id
        assert "io.modelcontextprotocol/subscriptionId" in frame["_meta"]
