"""Several versions of a workflow in one server (ADR 0039): ``tools/list`` shows the
newest version's schema once, and a new call runs the newest version."""

from typing import Any

import anyio
from mcp.shared.memory import create_client_server_memory_streams
from pydantic import BaseModel

from taskloom.bootstrap import Engine
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.registry import WorkflowRegistry
from taskloom.server import ServerSettings, TaskServer
from tests.server.client import open_client


class Before(BaseModel):
    n: int


class After(BaseModel):
    n: int
    label: str = "x"


def _flow(version: str, model: type[BaseModel]) -> Workflow[Any]:
    flow = Workflow("vflow", version=version, input=model)

    @flow.node()
    async def only(ctx: NodeContext[Any]) -> str:
        return version

    return flow


async def test_tools_list_shows_the_newest_version_and_calls_get_it(engine: Engine) -> None:
    registry = WorkflowRegistry()
    registry.register(_flow("2", After))
    registry.register(_flow("1", Before))
    server = TaskServer(engine.manager, registry, ServerSettings(recheck_s=None))
    async with (
        create_client_server_memory_streams() as (client_streams, server_streams),
        anyio.create_task_group() as task_group,
    ):
        task_group.start_soon(lambda: server.serve(*server_streams))
        async with open_client(*client_streams, None) as client:
            tools = (await client.request("tools/list"))["tools"]
            (shown,) = [tool for tool in tools if tool["name"] == "vflow"]
            assert set(shown["inputSchema"]["properties"]) == {"n", "label"}
            task_id = await client.start("vflow", {"n": 1})
        task_group.cancel_scope.cancel()
    assert (await engine.manager.get(task_id)).workflow_version == "2"
