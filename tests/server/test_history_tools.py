"""The history tools in-process: listed only with a run store; bad arguments; stdio owner."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from mcp.shared.memory import create_client_server_memory_streams

from taskloom.bootstrap import Engine
from taskloom.server import ServerSettings, TaskServer
from tests.server.client import LegacyClient, open_client


@asynccontextmanager
async def _connected(server: TaskServer) -> AsyncIterator[LegacyClient]:
    async with (
        create_client_server_memory_streams() as (client_streams, server_streams),
        anyio.create_task_group() as task_group,
    ):
        task_group.start_soon(lambda: server.serve(*server_streams))
        async with open_client(*client_streams) as client:
            yield client
        task_group.cancel_scope.cancel()


async def test_without_a_run_store_there_are_no_history_tools(engine: Engine) -> None:
    server = TaskServer(engine.manager, engine.workflows, ServerSettings(recheck_s=None))
    async with _connected(server) as client:
        names = {tool["name"] for tool in (await client.request("tools/list"))["tools"]}
        error = await client.error("tools/call", {"name": "task_attempts", "arguments": {}})
    assert "task_list" in names
    assert not names & {"task_attempts", "tasks_last_failed"}
    assert error.message == "Unknown tool: task_attempts"


async def test_history_tools_explain_bad_arguments_and_unknown_ids(client: LegacyClient) -> None:
    tools = {tool["name"]: tool for tool in (await client.request("tools/list"))["tools"]}
    assert tools["task_attempts"]["inputSchema"]["required"] == ["task_id"]
    missing = await client.call("task_attempts", {})
    assert missing["isError"] is True
    assert missing["content"][0]["text"].startswith("invalid arguments for task_attempts: task_id")
    unknown = await client.call("task_attempts", {"task_id": "nope"})
    assert unknown["content"][0]["text"] == "Task not found: nope"
    too_many = await client.call("tasks_last_failed", {"limit": 1000})
    assert too_many["isError"] is True


async def test_a_stdio_user_sees_the_failures_of_their_own_tasks(client: LegacyClient) -> None:
    task_id = await client.start("countdown", {"start": 3, "tick_s": 0, "fail_at": 1})
    assert (await client.result(task_id))["isError"] is True
    latest = await client.call("tasks_last_failed", {"limit": 1})
    (line,) = latest["content"][0]["text"].splitlines()
    assert f"{task_id} (countdown)" in line
    assert "RuntimeError: told to fail at 1" in line
