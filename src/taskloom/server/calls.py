"""``tools/list`` and ``tools/call``: a workflow's tool call becomes a durable task.

What a call of a workflow does depends on the request's generation
(``taskloom.server.generation``):

- 2025-11-25 (``capabilities.tasks`` was announced): with ``params.task``, the task is
  committed, then a follower is started, then the ``CreateTaskResult`` is returned by
  :meth:`ToolCalls.create_task`, where ``middleware.route_task_creation`` sends such a
  call (ADR 0045); without it, a ``required`` tool is
  ``-32601`` and an ``optional`` one is a plain call;
- 2026-07-28: the server decides (``modern.becomes_task``, ADR 0010): a task when the
  request declared the tasks extension (``params.task`` is ignored), else a plain call.
  A workflow's questions asked before its task exists are answered first, in MRTR
  rounds (``mrtr.gather``, ADR 0019); on 2025-11-25 the task asks them first;
- older versions: nothing was announced, so ``params.task`` is ignored (§2.1) and every
  call is a plain call.

A plain call runs the workflow as a task and answers its result (``plain.PlainCalls``);
one that repeats an unfinished call follows that call's task (ADR 0040). Any call may
carry an idempotency key in ``_meta["taskloom/idempotencyKey"]``: the same key gives the
same task (``submit``). Output schemas are shown only to clients that know tasks
(``generation.takes_tasks``): a plain host checks every non-error result against them,
which a deferred answer cannot meet.
The fallback tools (``task_status``...) answer at once; their task support is
forbidden, so ``params.task`` on them is ``-32601`` on 2025-11-25, as on a workflow
whose task support is ``forbidden`` (a plain call on every generation, ADR 0019).
"""

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from functools import partial
from typing import Any, Literal
from weakref import WeakKeyDictionary

import mcp_types as types
from mcp.server.context import ServerRequestContext
from pydantic import JsonValue

from taskloom.engine.dag import Workflow
from taskloom.engine.manager import DEFAULT, Sentinel, TaskManager
from taskloom.engine.models import Task
from taskloom.engine.submit import submit
from taskloom.server.errors import invalid_ttl, tool_forbids_task, tool_needs_task, unknown_tool
from taskloom.server.fallback import FALLBACK_TOOL_NAMES, FallbackTools
from taskloom.server.generation import Generation, generation, takes_tasks
from taskloom.server.modern import becomes_task, start_directed
from taskloom.server.mrtr import gather
from taskloom.server.plain import PlainCalls, complete, idempotency_key, progress_token
from taskloom.server.push import TaskFollowers
from taskloom.server.wire import legacy_create_task_result

Context = ServerRequestContext[Any, Any]


_TOOLS: "WeakKeyDictionary[Workflow[Any], dict[bool, types.Tool]]" = WeakKeyDictionary()
"""Each workflow's tools (with and without its output schema), built once: a workflow's
schemas never change once it is registered, and building them (pydantic's
``model_json_schema``) costs milliseconds."""


def tool_for(workflow: Workflow[Any], *, output_schema: bool = True) -> types.Tool:
    """The tool that starts *workflow*: input schema from its input model, output
    schema when it has an output model (and *output_schema*), ``execution.taskSupport``
    from the workflow (built on the first call, then reused)."""
    built = _TOOLS.setdefault(workflow, {})
    tool = built.get(output_schema)
    if tool is None:
        tool = built[output_schema] = _build_tool(workflow, output_schema=output_schema)
    return tool


def _build_tool(workflow: Workflow[Any], *, output_schema: bool) -> types.Tool:
    output = workflow.output_model if output_schema else None
    return types.Tool(
        name=workflow.name,
        title=workflow.title,
        description=workflow.description or None,
        input_schema=workflow.input_schema(),
        output_schema=output.model_json_schema(mode="serialization") if output else None,
        execution=types.ToolExecution(task_support=workflow.task_support),
    )


def list_tools(
    workflows: Mapping[str, Workflow[Any]],
    extra: Sequence[types.Tool] = (),
    *,
    output_schemas: bool = True,
) -> types.ListToolsResult:
    """Every workflow's tool in registration order, then *extra* (one page: tool lists
    are short); without *output_schemas*, none has one."""
    tools = [tool_for(workflow, output_schema=output_schemas) for workflow in workflows.values()]
    return types.ListToolsResult(tools=[*tools, *extra])


@dataclass(frozen=True)
class ToolCalls:
    """The tool handlers of one connection, acting for its *owner*; *max_unfinished*: the
    most unfinished tasks *owner* may have (``submit``)."""

    manager: TaskManager
    workflows: dict[str, Workflow[Any]]
    followers: TaskFollowers
    plain: PlainCalls
    _: KW_ONLY
    owner: str | None
    fallback: FallbackTools | None = None
    max_unfinished: int | None = None

    async def list_tools(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """Every workflow as a tool, then the fallback tools; output schemas only for a
        client that knows tasks."""
        extra = self.fallback.tools() if self.fallback else ()
        return list_tools(self.workflows, extra, output_schemas=takes_tasks(ctx))

    async def call_tool(self, ctx: Context, params: types.CallToolRequestParams) -> dict[str, Any]:
        """Start the workflow as a task, or run it as a plain call (module docstring)."""
        speaking = generation(ctx)
        if self.fallback is not None and params.name in FALLBACK_TOOL_NAMES:
            return complete(await self.fallback.call(params.name, params.arguments))
        workflow = self.workflows.get(params.name)
        if workflow is None:
            raise unknown_tool(params.name)
        answers: dict[str, JsonValue] = {}
        key = idempotency_key(ctx)
        if speaking is Generation.MODERN:
            as_task = becomes_task(ctx, workflow)
            first = gather(workflow, params)  # questions asked before the task exists
            if first.reply is not None:
                return first.reply
            answers = first.answers
            if as_task:
                return await start_directed(
                    self._submission(workflow, params.arguments, key, answers=answers)
                )
        elif speaking is Generation.LEGACY:
            if params.task is not None:  # middleware.route_task_creation sends it elsewhere
                raise RuntimeError("a task-augmented tools/call belongs to create_task")
            if workflow.task_support == "required":
                raise tool_needs_task(workflow.name)
        until_end = workflow.output_model is not None and takes_tasks(ctx)
        return complete(
            await self.plain.run(
                ctx, workflow, params.arguments, answers, idempotency_key=key, until_end=until_end
            )
        )

    async def create_task(
        self, ctx: Context, params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        """A 2025-11-25 task-augmented call: commit the task, start its follower, return
        the ``CreateTaskResult`` (a workflow or fallback tool that forbids tasks: ``-32601``)."""
        if self.fallback is not None and params.name in FALLBACK_TOOL_NAMES:
            raise tool_forbids_task(params.name)
        workflow = self.workflows.get(params.name)
        if workflow is None:
            raise unknown_tool(params.name)
        key = idempotency_key(ctx)
        if workflow.task_support == "forbidden":
            raise tool_forbids_task(workflow.name)
        assert params.task is not None  # route_task_creation sends only calls that carry one
        if isinstance((ctx.params or {}).get("task", {}).get("ttl"), bool):
            raise invalid_ttl()
        ttl: int | Literal[Sentinel.DEFAULT] = (
            DEFAULT if params.task.ttl is None else params.task.ttl
        )
        task = await self.followers.create_and_follow(
            self._submission(workflow, params.arguments, key, ttl_ms=ttl),
            session=ctx.session,
            request_id=ctx.request_id,
            progress_token=progress_token(ctx),
        )
        return legacy_create_task_result(task)

    def _submission(
        self,
        workflow: Workflow[Any],
        arguments: dict[str, Any] | None,
        key: str | None,
        *,
        answers: Mapping[str, JsonValue] | None = None,
        ttl_ms: int | Literal[Sentinel.DEFAULT] = DEFAULT,
    ) -> Callable[[], Awaitable[Task]]:
        """Submitting *workflow* for this connection's owner, within its quota."""
        return partial(
            submit,
            self.manager,
            workflow,
            arguments,
            owner=self.owner,
            ttl_ms=ttl_ms,
            answers=answers,
            max_unfinished=self.max_unfinished,
            idempotency_key=key,
        )
