"""The ``tasks/*`` methods of protocol 2025-11-25, for one connection's owner.

They are reached only by a 2025-11-25 request (``middleware.check_generation``). Engine
errors (unknown id, bad cursor, cancelling a finished task) are mapped by the
``error_boundary`` middleware.
"""

from contextlib import aclosing
from typing import Any, Final

import mcp_types as types
from mcp.server.context import ServerRequestContext

from taskloom.engine.manager import TaskManager
from taskloom.engine.states import TaskState
from taskloom.server.errors import answers_did_not_fit
from taskloom.server.questions import MAX_ASKS, InputAsker
from taskloom.server.wire import call_tool_result, legacy_task, related_task_meta, task_page

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
        return legacy_task(await self._manager.get(params.task_id, owner=self._owner))

    async def result(
        self, ctx: Context, params: types.GetTaskPayloadRequestParams
    ) -> dict[str, Any]:
        """Wait until the task is terminal, then answer what its ``tools/call`` would have
        answered, with the related-task ``_meta`` added to the result's own. Meanwhile the
        questions the task waits on are asked over this request's stream; after
        ``MAX_ASKS`` answers that do not fit one, this ends with ``-32602`` saying so
        (the task still waits: a new ``tasks/result`` asks again). A client that cannot
        be asked waits here for an answer given elsewhere (``task_answer``, the CLI)."""
        asker = InputAsker(self._manager, ctx, self._owner)
        watch = self._manager.watch(
            params.task_id, owner=self._owner, recheck_every=self._recheck_s
        )
        async with aclosing(watch) as snapshots:
            async for task in snapshots:  # the last one is terminal
                if task.state is TaskState.INPUT_REQUIRED:
                    unanswered = await asker.ask_pending(task)
                    if unanswered is not None and unanswered.problems:
                        raise answers_did_not_fit(
                            task.id,
                            unanswered.key,
                            unanswered.question.message,
                            unanswered.problems,
                            asks=MAX_ASKS,
                        )
        result = call_tool_result(task)
        meta = {**(result.get("_meta") or {}), **related_task_meta(task.id)}
        return {**result, "_meta": meta}

    async def list(self, ctx: Context, params: types.PaginatedRequestParams) -> dict[str, Any]:
        """A page of the owner's tasks, newest first, with ``nextCursor`` if more remain."""
        page = await self._manager.list(owner=self._owner, cursor=params.cursor)
        return task_page(page.tasks, page.next_cursor)

    async def cancel(self, ctx: Context, params: types.CancelTaskRequestParams) -> dict[str, Any]:
        """Cancel the task; it is ``cancelled`` in the store before this answers."""
        task = await self._manager.cancel(params.task_id, owner=self._owner, reason=CANCEL_REASON)
        return legacy_task(task)
