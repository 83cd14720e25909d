"""Plain calls: a workflow called without task support runs as a task and answers its
result on the call itself, sending progress against the request's token meanwhile.

If the caller cancels the request or disconnects, the task is cancelled.
"""

import contextlib
from collections.abc import Mapping
from contextlib import aclosing
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from pydantic import JsonValue

from taskloom.engine.dag import Workflow
from taskloom.engine.errors import InvalidRequestError, TaskloomError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.submit import submit
from taskloom.server.push import ProgressPush
from taskloom.server.wire import call_tool_result, invalid_arguments_result

_CANCEL_WRITE_S: Final = 10.0
Context = ServerRequestContext[Any, Any]


class PlainCalls:
    """The plain calls of one connection, acting for its *owner*."""

    def __init__(self, manager: TaskManager, *, owner: str | None, recheck_s: float | None):
        self._manager = manager
        self._owner = owner
        self._recheck_s = recheck_s

    async def run(
        self,
        ctx: Context,
        workflow: Workflow[Any],
        arguments: dict[str, Any] | None,
        answers: Mapping[str, JsonValue] | None = None,
    ) -> dict[str, Any]:
        """Run *workflow* as a task (with *answers* to its questions, if any were asked
        before it exists) and answer its ``CallToolResult``."""
        try:
            task = await submit(
                self._manager, workflow, arguments, owner=self._owner, answers=answers
            )
        except InvalidRequestError as error:
            return invalid_arguments_result(str(error))
        progress = ProgressPush(ctx.session, progress_token(ctx), related_request_id=ctx.request_id)
        try:
            finished = await self._follow(task, progress)
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(_CANCEL_WRITE_S, shield=True):
                await self._abandon(task)
            raise
        return call_tool_result(finished)

    async def _follow(self, task: Task, progress: ProgressPush) -> Task:
        watch = self._manager.watch(task.id, owner=self._owner, recheck_every=self._recheck_s)
        latest = task
        async with aclosing(watch) as snapshots:
            async for latest in snapshots:  # the last one is terminal
                await progress.update(latest)
        return latest

    async def _abandon(self, task: Task) -> None:
        """The caller went away (cancelled the request, or the connection closed)."""
        with contextlib.suppress(TaskloomError):  # it may have finished meanwhile
            await self._manager.cancel(
                task.id, owner=self._owner, reason="the tools/call request was cancelled"
            )


def complete(result: dict[str, Any]) -> dict[str, Any]:
    """A ``CallToolResult`` dict as the SDK's sieve expects it on every version: 2026-07-28
    requires ``resultType`` (which models default but dicts lack); older versions' sieve
    drops it."""
    return {**result, "resultType": "complete"}


def progress_token(ctx: Context) -> types.ProgressToken | None:
    """The request's ``_meta.progressToken``, if it sent one."""
    return ctx.meta.get("progress_token") if ctx.meta is not None else None
