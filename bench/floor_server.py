"""The floor: the smallest tasks server on the same SDK (``mcp==2.3.0``), over stdio.

No durability and no engine: tasks live in a dict and run in the lifespan's task group.
It serves the two bench tools (``noop`` answers at once, ``hold`` sleeps ``seconds``) as
tasks on both generations: 2025-11-25 (``params.task``, nested ``CreateTaskResult``,
``tasks/get``, ``tasks/list``, ``tasks/cancel``) and 2026-07-28 (the tasks extension
declared per request, flat ``CreateTaskResult``, ``tasks/get`` with the result inlined,
``tasks/cancel`` ack). Whatever taskloom adds on top of this server's figures is the cost
of durability and of the engine; what this server costs is the SDK, the transport and the
client. Run: ``python bench/floor_server.py`` (``FLOOR_PREFILL=N``: start with N tasks).
"""

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

EXTENSION: Final = "io.modelcontextprotocol/tasks"
LEGACY: Final = "2025-11-25"
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
PAGE: Final = 50
Context = ServerRequestContext[dict[str, TaskGroup], Any]


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class FloorTask:
    """One task, in memory."""

    task_id: str
    status: str = "working"
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    result: dict[str, Any] | None = None
    scope: anyio.CancelScope | None = None

    def move(self, status: str) -> None:
        if self.status not in TERMINAL:
            self.status, self.updated_at = status, _now()

    def wire(self, *, modern: bool) -> dict[str, Any]:
        ttl, poll = ("ttlMs", "pollIntervalMs") if modern else ("ttl", "pollInterval")
        body: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
        }
        body |= {"lastUpdatedAt": self.updated_at, ttl: 3_600_000, poll: 1000}
        if modern and self.status == "completed":
            body["result"] = self.result
        return body


TASKS: dict[str, FloorTask] = {}
ORDER: list[str] = []


class TaskIdParams(types.RequestParams):
    task_id: str = Field(alias="taskId")


@asynccontextmanager
async def lifespan(server: Server[Any]) -> AsyncIterator[dict[str, TaskGroup]]:
    async with anyio.create_task_group() as task_group:
        yield {"group": task_group}
        task_group.cancel_scope.cancel()


def _modern(ctx: Context) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


async def _body(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if name == "hold":
        await anyio.sleep(float(arguments.get("seconds", 60)))
    elif name != "noop":
        raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}")
    return {"content": [{"type": "text", "text": '"ok"'}], "isError": False}


def _start(ctx: Context, name: str, arguments: dict[str, Any]) -> FloorTask:
    task = FloorTask(secrets.token_urlsafe(18))
    TASKS[task.task_id] = task
    ORDER.append(task.task_id)

    async def job() -> None:
        with anyio.CancelScope() as scope:
            task.scope = scope
            task.result = await _body(name, arguments)
            task.move("completed")

    ctx.lifespan_context["group"].start_soon(job)
    return task


async def legacy_tasks(ctx: Context, call_next: CallNext) -> HandlerResult:
    """2025-11-25: announce ``capabilities.tasks``; answer a task-augmented call unsieved."""
    if ctx.method == "tools/call" and not _modern(ctx):
        params = dict(ctx.params or {})
        if params.get("task") is not None:
            task = _start(ctx, str(params.get("name")), dict(params.get("arguments") or {}))
            return {"task": task.wire(modern=False)}
    result = await call_next(ctx)
    if (
        ctx.method == "initialize"
        and isinstance(result, dict)
        and result.get("protocolVersion") == LEGACY
    ):
        capabilities: dict[str, Any] = {"list": {}, "cancel": {}}
        capabilities["requests"] = {"tools": {"call": {}}}
        result = {**result, "capabilities": {**result["capabilities"], "tasks": capabilities}}
    return result


async def call_tool(ctx: Context, params: types.CallToolRequestParams) -> dict[str, Any]:
    arguments = dict(params.arguments or {})
    if _modern(ctx) and _declared(ctx):
        return {"resultType": "task", **_start(ctx, params.name, arguments).wire(modern=True)}
    return await _body(params.name, arguments)


def _declared(ctx: Context) -> bool:
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and EXTENSION in capabilities.extensions)


def _lookup(task_id: str) -> FloorTask:
    task = TASKS.get(task_id)
    if task is None:
        raise MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found")
    return task


async def tasks_get(ctx: Context, params: TaskIdParams) -> dict[str, Any]:
    task = _lookup(params.task_id)
    if _modern(ctx):
        return {"resultType": "complete", **task.wire(modern=True)}
    return task.wire(modern=False)


async def tasks_list(ctx: Context, params: types.PaginatedRequestParams) -> dict[str, Any]:
    start = int(params.cursor) if params.cursor else 0  # newest first: count from the end
    end = len(ORDER) - start
    chosen = ORDER[max(end - PAGE, 0) : max(end, 0)][::-1]
    page: dict[str, Any] = {"tasks": [TASKS[i].wire(modern=False) for i in chosen]}
    if end - PAGE > 0:
        page["nextCursor"] = str(start + PAGE)
    return page


async def tasks_cancel(ctx: Context, params: TaskIdParams) -> dict[str, Any]:
    task = _lookup(params.task_id)
    if task.status in TERMINAL and not _modern(ctx):
        raise MCPError(code=INVALID_PARAMS, message=f"Cannot cancel task: {task.status}")
    task.move("cancelled")
    if task.scope is not None:
        task.scope.cancel()
    return {"resultType": "complete"} if _modern(ctx) else task.wire(modern=False)


async def list_tools(
    ctx: Context, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    execution = types.ToolExecution(task_support="optional")
    schema: dict[str, Any] = {"type": "object"}
    return types.ListToolsResult(
        tools=[types.Tool(name=n, input_schema=schema, execution=execution) for n in TOOLS]
    )


TOOLS: Final = ("noop", "hold")


def build() -> Server[Any]:
    """The floor server."""
    server: Server[Any] = Server("floor", version="0", lifespan=lifespan, on_list_tools=list_tools)
    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    server.add_request_handler("tasks/get", TaskIdParams, tasks_get)
    server.add_request_handler("tasks/list", types.PaginatedRequestParams, tasks_list)
    server.add_request_handler("tasks/cancel", TaskIdParams, tasks_cancel)
    server.extensions[EXTENSION] = {}
    server.middleware.append(legacy_tasks)
    return server


def prefill(count: int) -> None:
    """*count* completed tasks, as if created earlier (for the `tasks/list` benchmark)."""
    for index in range(count):
        task = FloorTask(f"prefilled{index:015d}", status="completed")
        task.result = {"content": [{"type": "text", "text": '"ok"'}], "isError": False}
        TASKS[task.task_id] = task
        ORDER.append(task.task_id)


async def main() -> None:
    prefill(int(os.environ.get("FLOOR_PREFILL", "0")))
    server = build()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
