"""The two places where taskloom bends ``mcp==2.3.0`` to serve 2025-11-25 Tasks (ADR 0007).

1. The SDK validates every ``tools/call`` result on a 2025-11-25 connection against
   ``CallToolResult``, so a ``CreateTaskResult`` returned by the handler would become
   ``-32603``. The handler raises :class:`TaskCreated` instead, and :func:`task_bridge`
   (a server middleware, whose return value the SDK sends unchecked) answers with its
   payload. The SDK's init gate and params validation have run by then.
2. ``Server.get_capabilities`` never announces ``capabilities.tasks``;
   :func:`advertise_tasks` adds it to the ``InitializeResult`` when, and only when, the
   negotiated version is 2025-11-25.

``Server.middleware`` is marked provisional in the SDK; ``mcp`` is pinned exactly and
tests/server covers both seams.
"""

from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

from taskloom.server.protocol import LEGACY_VERSION, tasks_capability


class TaskCreated(Exception):  # a signal carrying a result, not an error
    """Raised by the ``tools/call`` handler: answer with this ``CreateTaskResult``."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__("task created")
        self.payload = payload


async def task_bridge(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: deliver a :class:`TaskCreated` payload unsieved."""
    try:
        return await call_next(ctx)
    except TaskCreated as created:
        return created.payload


async def advertise_tasks(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """Server middleware: add ``capabilities.tasks`` to a 2025-11-25 ``InitializeResult``."""
    result = await call_next(ctx)
    if (
        ctx.method == "initialize"
        and isinstance(result, dict)
        and result.get("protocolVersion") == LEGACY_VERSION
    ):
        capabilities = {**(result.get("capabilities") or {}), "tasks": tasks_capability()}
        result = {**result, "capabilities": capabilities}
    return result
