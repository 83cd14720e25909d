"""The demo's side of MCP: ``taskloom serve`` as a child process it may kill -9, driven by
the MCP Python SDK's client session.

The SDK's ``stdio_client`` hides the server's process, and its typed client cannot send
task-augmented calls yet, so this module starts the process itself, pipes its stdio into
the SDK's JSON-RPC dispatcher, and sends the 2025-11-25 task requests as raw requests.
"""

import json
import math
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import IO, Any, Final

import anyio
import mcp_types as types
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from anyio.streams.text import TextReceiveStream
from mcp.client.session import ClientSession
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage

PROTOCOL: Final = "2025-11-25"
REQUEST_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 10.0


class McpClient:
    """The 2025-11-25 requests the demo makes, over an initialized session."""

    def __init__(self, dispatcher: JSONRPCDispatcher[Any], process: Process) -> None:
        self._dispatcher = dispatcher
        self.process = process
        self.tools: list[str] = []

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one request and return its result (raises ``MCPError`` on an error)."""
        with anyio.fail_after(REQUEST_TIMEOUT_S):
            return await self._dispatcher.send_raw_request(method, params)

    async def start_task(self, tool: str, arguments: dict[str, Any]) -> str:
        """``tools/call`` with ``params.task``: the server answers a task id at once."""
        created = await self.request(
            "tools/call", {"name": tool, "arguments": arguments, "task": {"ttl": 3_600_000}}
        )
        task_id: str = created["task"]["taskId"]
        return task_id

    async def get(self, task_id: str) -> dict[str, Any]:
        """``tasks/get``: status and status message."""
        return await self.request("tasks/get", {"taskId": task_id})

    async def result(self, task_id: str) -> dict[str, Any]:
        """``tasks/result``: what the plain call would have answered."""
        return await self.request("tasks/result", {"taskId": task_id})

    async def cancel(self, task_id: str) -> dict[str, Any]:
        """``tasks/cancel``."""
        return await self.request("tasks/cancel", {"taskId": task_id})


def structured(result: dict[str, Any]) -> Any:
    """A tool result's structured content, else its text parsed as JSON."""
    if "structuredContent" in result:
        return result["structuredContent"]
    text = "".join(part.get("text", "") for part in result.get("content", []))
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


@asynccontextmanager
async def serve(
    db: Path, *, cwd: Path, errlog: IO[str], settings: str | None = None
) -> AsyncIterator[McpClient]:
    """Start ``python -m taskloom serve --db DB [--settings SETTINGS]`` and yield an
    initialized client.

    On exit the server's stdin is closed (it stops cleanly), unless it was killed.
    """
    argv = [sys.executable, "-m", "taskloom", "serve", "--db", str(db)]
    if settings is not None:
        argv += ["--settings", settings]
    process = await anyio.open_process(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog, cwd=cwd
    )
    inbound_send, inbound = anyio.create_memory_object_stream[SessionMessage | Exception](math.inf)
    outbound, outbound_receive = anyio.create_memory_object_stream[SessionMessage](math.inf)
    try:
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(_read, process, inbound_send)
            task_group.start_soon(_write, process, outbound_receive)
            dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(inbound, outbound)
            async with ClientSession(dispatcher=dispatcher):
                client = McpClient(dispatcher, process)
                await client.request(
                    "initialize",
                    {
                        "protocolVersion": PROTOCOL,
                        "capabilities": {},
                        "clientInfo": {"name": "taskloom-demo", "version": "1"},
                    },
                )
                await dispatcher.notify("notifications/initialized", None)
                listed = await client.request("tools/list")
                client.tools = [tool["name"] for tool in listed["tools"]]
                yield client
            task_group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)


async def _read(
    process: Process, inbound: MemoryObjectSendStream[SessionMessage | Exception]
) -> None:
    assert process.stdout is not None
    buffer = ""
    with inbound, suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
        async for chunk in TextReceiveStream(process.stdout):
            *lines, buffer = (buffer + chunk).split("\n")
            for line in lines:
                if line.strip():
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    await inbound.send(SessionMessage(message))


async def _write(process: Process, outbound: MemoryObjectReceiveStream[SessionMessage]) -> None:
    assert process.stdin is not None
    with outbound, suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        async for session_message in outbound:
            text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
            await process.stdin.send((text + "\n").encode())


async def _stop(process: Process) -> None:
    if process.returncode is None and process.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError):
            await process.stdin.aclose()
    with anyio.move_on_after(STOP_TIMEOUT_S):
        await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
