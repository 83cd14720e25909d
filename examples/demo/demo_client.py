"""The demo's side of MCP: ``taskloom serve`` as a child process, driven by the MCP Python
SDK's own stdio client and client session (protocol 2025-11-25, task-augmented calls).

Two things the SDK does not offer are bent into it:

- its typed ``tools/call`` expects a ``CallToolResult``, never the ``CreateTaskResult`` a
  task-augmented call answers, so that one request goes through the session's JSON-RPC
  dispatcher raw (``tasks/get``, ``tasks/result`` and ``tasks/cancel`` are typed);
- ``stdio_client`` owns the server's process and does not hand it out, while the demo
  must kill it with SIGKILL mid-run: the server is started through a one-line launcher
  that writes its process id to a file, then ``exec``s ``python -m taskloom serve``
  (same process, same id).
"""

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

REQUEST_TIMEOUT_S: Final = 60.0
TASK_TTL_MS: Final = 3_600_000
LAUNCHER: Final = (
    "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
    "os.execv(sys.executable, [sys.executable, '-m', 'taskloom', *sys.argv[2:]])"
)
"""Writes the process id to the file ``argv[1]``, then becomes ``taskloom ARGV[2:]``."""


@dataclass
class McpClient:
    """The 2025-11-25 task requests the demo makes, over an initialized SDK session."""

    session: ClientSession
    dispatcher: JSONRPCDispatcher[Any]
    pid: int
    tools: list[str] = field(default_factory=list)

    async def start_task(self, tool: str, arguments: dict[str, Any]) -> str:
        """``tools/call`` with ``params.task``: the server answers a task id at once."""
        params = {"name": tool, "arguments": arguments, "task": {"ttl": TASK_TTL_MS}}
        with anyio.fail_after(REQUEST_TIMEOUT_S):
            answer = await self.dispatcher.send_raw_request("tools/call", params)
        return types.CreateTaskResult.model_validate(answer).task.task_id

    async def get(self, task_id: str) -> dict[str, Any]:
        """``tasks/get``: status and status message (as the wire spells them)."""
        request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
        status = await self.session.send_request(request, types.GetTaskResult)
        return status.model_dump(by_alias=True, exclude_none=True)

    async def result(self, task_id: str) -> types.CallToolResult:
        """``tasks/result``: what the plain call would have answered."""
        request = types.GetTaskPayloadRequest(
            params=types.GetTaskPayloadRequestParams(task_id=task_id)
        )
        return await self.session.send_request(request, types.CallToolResult)

    async def cancel(self, task_id: str) -> dict[str, Any]:
        """``tasks/cancel``."""
        request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
        cancelled = await self.session.send_request(request, types.CancelTaskResult)
        return cancelled.model_dump(by_alias=True, exclude_none=True)

    def kill(self) -> None:
        """SIGKILL the server: no clean stop, no hand-off (the SDK reaps it on exit)."""
        os.kill(self.pid, signal.SIGKILL)


def structured(result: types.CallToolResult) -> Any:
    """A tool result's structured content, else its text parsed as JSON."""
    if result.structured_content is not None:
        return result.structured_content
    text = "".join(part.text for part in result.content if isinstance(part, types.TextContent))
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


@asynccontextmanager
async def serve(
    db: Path, *, cwd: Path, errlog: TextIO, settings: str | None = None
) -> AsyncIterator[McpClient]:
    """Start ``python -m taskloom serve --db DB [--settings SETTINGS]`` and yield an
    initialized client; on exit the SDK closes the server's stdin (it stops cleanly),
    unless it was killed."""
    pid_file = cwd / "server.pid"
    pid_file.unlink(missing_ok=True)
    argv = ["-c", LAUNCHER, str(pid_file), "serve", "--db", str(db)]
    if settings is not None:
        argv += ["--settings", settings]
    server = StdioServerParameters(command=sys.executable, args=argv, env=dict(os.environ), cwd=cwd)
    async with stdio_client(server, errlog=errlog) as (read, write):
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read, write)
        async with ClientSession(
            dispatcher=dispatcher,
            read_timeout_seconds=REQUEST_TIMEOUT_S,
            client_info=types.Implementation(name="taskloom-demo", version="1"),
        ) as session:
            with anyio.fail_after(REQUEST_TIMEOUT_S):
                await session.initialize()
                listed = await session.list_tools()
            pid = int(await anyio.Path(pid_file).read_text())  # written before the exec
            yield McpClient(session, dispatcher, pid, [tool.name for tool in listed.tools])
