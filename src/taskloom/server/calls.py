"""``tools/list`` and ``tools/call``: a workflow's tool call becomes a durable task.

On a 2025-11-25 connection (where ``capabilities.tasks`` was announced):

- with ``params.task``: the task is committed, then a follower is started, then the
  ``CreateTaskResult`` is answered (through the bridge, ADR 0007);
- without it, on a ``required`` tool: ``-32601``;
- without it, on an ``optional`` tool: the task runs and the call waits for its result;
- with it, on a fallback tool (``task_status``...) or a workflow whose task support is
  ``forbidden``: ``-32601``.

On 2026-07-28 the server decides (``modern.becomes_task``, ADR 0010): a workflow's
call becomes a task when the request declared the tasks extension (never for a
``forbidden`` one), and ``params.task`` is ignored. A workflow's questions asked before
its task exists are answered first, in MRTR rounds (``mrtr.gather``, ADR 0019); on
2025-11-25 the task asks them first. On any older version nothing was announced, so ``params.task`` is ignored
and every call waits for its result (2025-11-25 §2.1: process normally, ignore ``task``).
"""

import contextlib
from collections.abc import Mapping
from contextlib import aclosing
from functools import partial
from typing import Any, Final, Literal

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from pydantic import JsonValue

from taskloom.engine.dag import Workflow
from taskloom.engine.errors import InvalidRequestError, TaskloomError
from taskloom.engine.manager import DEFAULT, Sentinel, TaskManager
from taskloom.engine.models import Task
from taskloom.engine.submit import submit
from taskloom.server.bridge import TaskCreated
from taskloom.server.errors import invalid_ttl, tool_forbids_task, tool_needs_task, unknown_tool
from taskloom.server.fallback import FALLBACK_TOOL_NAMES, FallbackTools
from taskloom.server.modern import becomes_task, start_directed
from taskloom.server.mrtr import gather
from taskloom.server.notify import ProgressPush, TaskFollowers
from taskloom.server.protocol import LEGACY_VERSION, is_modern
from taskloom.server.results import call_tool_result, invalid_arguments_result
from taskloom.server.tools import list_tools
from taskloom.server.wire_legacy import create_task_result

_CANCEL_WRITE_S: Final = 10.0
Context = ServerRequestContext[Any, Any]


class ToolCalls:
    """The tool handlers of one connection, acting for its *owner*."""

    def __init__(
        self,
        manager: TaskManager,
        workflows: dict[str, Workflow[Any]],
        followers: TaskFollowers,
        *,
        owner: str | None,
        recheck_s: float | None,
        fallback: FallbackTools | None = None,
    ) -> None:
        self._manager = manager
        self._workflows = workflows
        self._followers = followers
        self._fallback = fallback
        self._owner = owner
        self._recheck_s = recheck_s

    async def list_tools(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """Every workflow as a tool, then the fallback tools."""
        return list_tools(self._workflows, self._fallback.tools() if self._fallback else ())

    async def call_tool(self, ctx: Context, params: types.CallToolRequestParams) -> dict[str, Any]:
        """Start the workflow as a task, or run it and wait (see the module docstring)."""
        tasks_announced = ctx.protocol_version == LEGACY_VERSION
        if self._fallback is not None and params.name in FALLBACK_TOOL_NAMES:
            if tasks_announced and params.task is not None:
                raise tool_forbids_task(params.name)
            return _complete(await self._fallback.call(params.name, params.arguments))
        workflow = self._workflows.get(params.name)
        if workflow is None:
            raise unknown_tool(params.name)
        answers: dict[str, JsonValue] = {}
        if is_modern(ctx):
            as_task = becomes_task(ctx, workflow)
            first = gather(workflow, params)  # questions asked before the task exists
            if first.reply is not None:
                return first.reply
            answers = first.answers
            if as_task:
                return await start_directed(
                    self._manager, workflow, params.arguments, owner=self._owner, answers=answers
                )
        if tasks_announced and params.task is not None:
            if workflow.task_support == "forbidden":
                raise tool_forbids_task(workflow.name)
            await self._start(ctx, workflow, params.arguments, params.task)
        if tasks_announced and workflow.task_support == "required":
            raise tool_needs_task(workflow.name)
        return _complete(await self._run(ctx, workflow, params.arguments, answers))

    async def _start(
        self,
        ctx: Context,
        workflow: Workflow[Any],
        arguments: dict[str, Any] | None,
        metadata: types.TaskMetadata,
    ) -> None:
        if isinstance((ctx.params or {}).get("task", {}).get("ttl"), bool):
            raise invalid_ttl()
        ttl: int | Literal[Sentinel.DEFAULT] = DEFAULT if metadata.ttl is None else metadata.ttl
        task = await self._followers.create_and_follow(
            partial(submit, self._manager, workflow, arguments, owner=self._owner, ttl_ms=ttl),
            session=ctx.session,
            request_id=ctx.request_id,
            progress_token=_progress_token(ctx),
        )
        raise TaskCreated(create_task_result(task))

    async def _run(
        self,
        ctx: Context,
        workflow: Workflow[Any],
        arguments: dict[str, Any] | None,
        answers: Mapping[str, JsonValue],
    ) -> dict[str, Any]:
        try:
            task = await submit(
                self._manager, workflow, arguments, owner=self._owner, answers=answers
            )
        except InvalidRequestError as error:
            return invalid_arguments_result(str(error))
        progress = ProgressPush(
            ctx.session, _progress_token(ctx), related_request_id=ctx.request_id
        )
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


def _complete(result: dict[str, Any]) -> dict[str, Any]:
    """A ``CallToolResult`` dict as the SDK's sieve expects it on every version: 2026-07-28
    requires ``resultType`` (which models default but dicts lack); older versions' sieve
    drops it."""
    return {**result, "resultType": "complete"}


def _progress_token(ctx: Context) -> types.ProgressToken | None:
    return ctx.meta.get("progress_token") if ctx.meta is not None else None
