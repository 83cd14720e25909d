"""DurableTasks inside an existing MCPServer, over in-process connections: the host's own
tools, resource and prompt answer as before; the durable tools are tasks on both
generations; a restart of the server resumes a run it cut short."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.shared.memory import create_client_server_memory_streams

from taskloom.engine.errors import WorkflowDefinitionError
from taskloom.server.middleware import CREATE_TASK_METHOD
from tests.embedded.host import existing_server
from tests.helpers import eventually
from tests.server import flows
from tests.server.client import LegacyClient, open_client
from tests.server.modern_client import ModernClient, open_modern_client

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh_gates() -> None:
    flows.GATES.clear()


@asynccontextmanager
async def served(mcp: MCPServer[Any]) -> AsyncIterator[Any]:
    """Run *mcp* on an in-process stream pair (its lifespan included); the client's."""
    lowlevel = mcp._lowlevel_server  # what the SDK's own in-memory transport runs
    async with (
        create_client_server_memory_streams() as (client_streams, server_streams),
        anyio.create_task_group() as task_group,
    ):
        task_group.start_soon(
            lambda: lowlevel.run(*server_streams, lowlevel.create_initialization_options())
        )
        yield client_streams
        task_group.cancel_scope.cancel()


@asynccontextmanager
async def legacy(mcp: MCPServer[Any]) -> AsyncIterator[LegacyClient]:
    async with served(mcp) as streams, open_client(*streams) as client:
        yield client


@asynccontextmanager
async def modern(mcp: MCPServer[Any]) -> AsyncIterator[ModernClient]:
    async with served(mcp) as streams, open_modern_client(*streams) as client:
        yield client


async def poll_legacy(client: LegacyClient, task_id: str, status: str) -> None:
    """Poll ``tasks/get`` (bounded), as a requestor does, until the task shows *status*."""

    async def reached() -> bool:
        task = await client.get(task_id)
        return bool(task["status"] == status)

    await eventually(reached, every_s=0.02)


async def test_the_hosts_own_tools_resource_and_prompt_answer_as_before(tmp_path: Path) -> None:
    async with Client(existing_server(tmp_path / "t.db")) as client:
        added = await client.call_tool("add", {"a": 2, "b": 3})
        assert added.structured_content == {"result": 5}
        read = await client.read_resource("note://readme")
        assert read.contents[0].text == "read me"  # type: ignore[union-attr]
        prompt = await client.get_prompt("greet", {"name": "Ada"})
        assert prompt.messages[0].content.text == "Hello, Ada!"  # type: ignore[union-attr]
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert names[:4] == ["add", "announce", "slow_sum", "wait_gate"]
        assert "task_status" in names


async def test_a_durable_tool_is_a_plain_call_for_a_client_without_tasks(tmp_path: Path) -> None:
    async with Client(existing_server(tmp_path / "t.db")) as client:
        result = await client.call_tool("slow_sum", {"a": 2, "b": 5})
        assert not result.is_error
        assert result.content[0].text == "7"  # type: ignore[union-attr]


async def test_a_durable_tool_is_a_task_on_2025_11_25(tmp_path: Path) -> None:
    async with legacy(existing_server(tmp_path / "t.db")) as client:
        assert "tasks" in client.initialize_result["capabilities"]
        task_id = await client.start("slow_sum", {"a": 1, "b": 2})
        await poll_legacy(client, task_id, "completed")
        result = await client.result(task_id)
        assert result["content"][0]["text"] == "3"
        plain = await client.call("add", {"a": 1, "b": 1})
        assert plain["structuredContent"] == {"result": 2}


async def test_a_durable_tool_is_a_task_on_2026_07_28(tmp_path: Path) -> None:
    async with modern(existing_server(tmp_path / "t.db")) as client:
        task_id = await client.start("slow_sum", {"a": 4})
        done = await client.until(task_id)
        assert done["status"] == "completed"
        assert done["result"]["content"][0]["text"] == "5"
        plain = await client.call("add", {"a": 1, "b": 1}, declare=True)
        assert plain["structuredContent"] == {"result": 2}


async def test_unknown_arguments_of_a_durable_function_are_refused(tmp_path: Path) -> None:
    async with legacy(existing_server(tmp_path / "t.db")) as client:
        error = await client.error(
            "tools/call", {"name": "slow_sum", "arguments": {"a": 1, "c": 2}, "task": {}}
        )
        assert error.code == -32602
        assert "c" in error.message


async def test_the_method_a_create_is_sent_on_is_not_callable_directly(
    tmp_path: Path,
) -> None:
    params = {"name": "slow_sum", "arguments": {"a": 1}, "task": {}}
    async with legacy(existing_server(tmp_path / "t.db")) as client:
        error = await client.error(CREATE_TASK_METHOD, params)
        assert (error.code, error.message) == (-32601, "Method not found")
        assert not (await client.request("tasks/list"))["tasks"]


async def test_a_restart_of_the_server_resumes_a_run_it_cut_short(tmp_path: Path) -> None:
    database = tmp_path / "t.db"
    async with legacy(existing_server(database)) as client:
        task_id = await client.start("wait_gate", {"name": "g"})
        await poll_legacy(client, task_id, "working")
    flows.gate("g").set()  # the first server is gone; its run was cut short
    async with legacy(existing_server(database)) as client:
        await poll_legacy(client, task_id, "completed")
        assert (await client.result(task_id))["content"][0]["text"] == "opened g"


async def test_a_host_tool_with_a_durable_tools_name_is_refused_at_start(tmp_path: Path) -> None:
    mcp = existing_server(tmp_path / "t.db")

    @mcp.tool(name="slow_sum")
    def shadowed(a: int) -> int:
        """The host's own slow_sum: taskloom's would take all its calls."""
        return a

    with pytest.raises(WorkflowDefinitionError, match="'slow_sum' is both a tool of this"):
        async with Client(mcp):
            pass
