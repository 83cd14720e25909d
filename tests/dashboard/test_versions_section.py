"""The task list's "Workflow versions" section (ADR 0039): what each version still has to
finish, who has it, and whether it is safe to remove; only for a viewer of every owner."""

from datetime import timedelta
from typing import Any, cast

from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.versions import VersionStore
from tests.dashboard.support import site


class Empty(BaseModel):
    pass


def _flow(version: str) -> Workflow[Any]:
    flow = Workflow("vflow", version=version, input=Empty)

    @flow.node()
    async def only(ctx: NodeContext[Empty]) -> str:
        return version

    return flow


async def test_the_operator_sees_each_version_and_what_it_has_left() -> None:
    workflows = WorkflowRegistry()
    for version in ("1", "2", "3"):
        workflows.register(_flow(version))
    async with site(tokens=None, operator=True, workflows=workflows) as shown:
        await shown.manager.create("vflow", {}, workflow_version="2")
        await shown.manager.create("vflow", {}, workflow_version="0")
        now = shown.clock.now()
        versions = cast(VersionStore, shown.runs)
        await versions.record_loaded("w1", [("vflow", "3")], now, now + timedelta(minutes=1))
        page = (await shown.http.get("/ui/")).text
    assert "Workflow versions" in page
    rows = page.split('id="versions-title"')[1].split("</tbody>")[0]
    assert "<td>0</td><td>no</td><td>1</td>" in rows
    assert "no process has it: 1 run waits" in rows
    assert "<td>1</td><td>this server</td><td>0</td><td></td><td>safe to remove</td>" in rows
    assert "draining: 1 unfinished run" in rows
    assert "<td>3</td><td>this server, workers</td>" in rows
    assert "newest: new calls get it" in rows


async def test_a_viewer_of_its_own_tasks_sees_no_versions_section() -> None:
    async with site(tokens=None, workflows=WorkflowRegistry({"vflow": _flow("1")})) as shown:
        await shown.manager.create("vflow", {}, workflow_version="1")
        page = (await shown.http.get("/ui/")).text
    assert "Workflow versions" not in page
