"""Connections that do not speak 2025-11-25 Tasks: the SDK's own high-level client."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.shared.exceptions import MCPError
from mcp.shared.memory import create_client_server_memory_streams

from taskloom.server import TaskServer


@asynccontextmanager
async def in_process(server: TaskServer) -> AsyncIterator[TransportStreams]:
    async with (
        create_client_server_memory_streams() as (client_streams, server_streams),
        anyio.create_task_group() as task_group,
    ):
        task_group.start_soon(lambda: server.serve(*server_streams))
        yield client_streams
        task_group.cancel_scope.cancel()


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_the_sdk_client_calls_workflows_as_plain_tools(
    task_server: TaskServer, mode: str
) -> None:
    with anyio.fail_after(20):
        async with Client(in_process(task_server), mode=mode) as client:
            result = await client.call_tool("countdown", {"start": 3, "tick_s": 0})
            assert result.structured_content == {"counted": 3, "lanes": 4}
            assert result.is_error is False
            listed = await client.call_tool("task_list", {})
            assert listed.is_error is False


async def test_tasks_get_without_the_extension_is_32021_on_2026_07_28(
    task_server: TaskServer,
) -> None:
    with anyio.fail_after(20):
        async with Client(in_process(task_server), mode="2026-07-28") as client:
            assert client.protocol_version == "2026-07-28"
            request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id="x"))
            with pytest.raises(MCPError) as raised:
                await client.session.send_request(request, types.GetTaskResult)
            assert raised.value.error.code == -32021
