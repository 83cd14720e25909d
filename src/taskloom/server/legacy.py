"""The ``tasks/*`` methods of protocol 2025-11-25, for one connection's owner.

Each method answers only on a 2025-11-25 connection (``-32601`` elsewhere: the methods
do not exist before it, and 2026-07-28 replaces them with the tasks extension). Engine
errors (unknown id, bad cursor, cancelling a finished task) are mapped by
``errors.error_boundary``.
"""

from contextlib import aclosing
from typing import Any, Final

import mcp_types as types
from mcp.server.context import ServerRequestContext

from taskloom.engine.manager import TaskManager
from taskloom.engine.states import TaskState
from taskloom.server.elicit import InputAsker
from taskloom.server.errors import not_on_this_version
from taskloom.server.protocol import LEGACY_VERSION, related_task_meta
from taskloom.server.results import call_tool_result
from taskloom.server.wire_legacy import legacy_task, task_page

CANCEL_REASON: Final = "cancelled by the requestor"
Context = ServerRequestContext[Any, Any]


class LegacyTasks:
    """``tasks/get``, ``tasks/result``, ``tasks/list`` and ``tasks/cancel``."""

    def __init__(self, manager: TaskManager, *, owner: str | None, recheck_s: float | None):
        self._manager = manager
        self._owner = owner
        self._recheck_s = recheck_s

    async def get(self, ctx: Context, params: types.GetTaskRequestParams) -> dict[str, Any]:
        """The task, flat, without related-task ``_meta``."""
        _require_legacy(ctx)
        return legacy_task(await self._manager.get(params.task_id, owner=self._owner))

    async def result(
        self, ctx: Context, params: types.GetTaskPayloadRequestParams
    ) -> dict[str, Any]:
        """Wait until the task is terminal, then answer what its ``tools/call`` would have
        answered, with the related-task ``_meta`` added to the result's own. Meanwhile the
        questions the task waits on are asked over this request's stream."""
        _require_legacy(ctx)
        asker = InputAsker(self._manager, ctx, self._owner)
        watch = self._manager.watch(
            params.task_id, owner=self._owner, recheck_every=self._recheck_s
        )
        async with aclosing(watch) as snapshots:
            async for task in snapshots:  # the last one is terminal
                if task.state is TaskState.INPUT_REQUIRED:
                    await asker.ask_pending(task)
        result = call_tool_result(task)
        meta = {**(result.get("_meta") or {}), **related_task_meta(task.id)}
        return {**result, "_meta": meta}

    async def list(self, ctx: Context, params: types.PaginatedRequestParams) -> dict[str, Any]:
        """A page of the owner's tasks, newest first, with ``nextCursor`` if more remain."""
        _require_legacy(ctx)
        page = await self._manager.list(owner=self._owner, cursor=params.cursor)
        return task_page(page.tasks, page.next_cursor)

    async def cancel(self, ctx: Context, params: types.CancelTaskRequestParams) -> dict[str, Any]:
        """Cancel the task; it is ``cancelled`` in the store before this answers."""
        _require_legacy(ctx)
        task = await self._manager.cancel(params.task_id, owner=self._owner, reason=CANCEL_REASON)
        return legacy_task(task)


def _require_legacy(ctx: Context) -> None:
    if ctx.protocol_version != LEGACY_VERSION:
        raise not_on_this_version(ctx.method, ctx.protocol_version)
