"""The 2026-07-28 tasks extension (SEP-2663): server-directed tasks and ``tasks/*``.

Every request is judged on its own ``_meta`` (2026 has no sessions). A ``tools/call``
of a workflow becomes a task exactly when that request declared the extension (ADR
0010: ``optional`` and ``required`` alike; ``required`` without it is ``-32021``;
``forbidden`` never, ADR 0019); the ``CreateTaskResult`` is answered once the task is
committed. ``tasks/get``,
``tasks/update`` and ``tasks/cancel`` check that the extension was declared (``-32021``),
then that the task is visible to the owner (``-32602``); over HTTP the ``Mcp-Name``
header was checked before (``-32020``, ``taskloom.server.routing``). ``tasks/result`` and ``tasks/list`` do not exist here
(``-32601``, from the 2025-11-25 handlers).
"""

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import Field, JsonValue, ValidationError

from taskloom.engine.dag import Workflow
from taskloom.engine.errors import (
    IllegalTransitionError,
    InputNotRequestedError,
    InvalidAnswerError,
    TaskNotFoundError,
    TaskStateError,
)
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import InputRequest
from taskloom.engine.submit import submit
from taskloom.server.elicit import refuse
from taskloom.server.errors import (
    missing_tasks_extension,
    not_on_this_version,
)
from taskloom.server.protocol import declares_tasks_extension, is_modern
from taskloom.server.wire_modern import create_task_result, detailed_task

CANCEL_REASON: Final = "cancelled by the requestor"
ACK: Final = {"resultType": "complete"}
Context = ServerRequestContext[Any, Any]
P = TypeVar("P")
Handler = Callable[[Context, P], Awaitable[dict[str, Any]]]


class UpdateTaskParams(types.RequestParams):
    """``tasks/update`` params. The responses stay loose JSON here: a key the task never
    issued is ignored whatever it holds; only answers to pending questions are checked."""

    task_id: str = Field(alias="taskId")
    input_responses: dict[str, Any] = Field(alias="inputResponses")


def becomes_task(ctx: Context, workflow: Workflow[Any]) -> bool:
    """On 2026-07-28, whether this call of *workflow* becomes a task: when the request
    declared the extension, unless the workflow forbids tasks (it then always runs to
    its result).

    Raises:
        MCPError: ``-32021`` for a ``required`` workflow without the extension.
    """
    if workflow.task_support == "forbidden":
        return False
    if not declares_tasks_extension(ctx):
        if workflow.task_support == "required":
            raise missing_tasks_extension(f"Tool {workflow.name!r} runs only as a task; it")
        return False
    return True


async def start_directed(
    manager: TaskManager,
    workflow: Workflow[Any],
    arguments: Mapping[str, Any] | None,
    *,
    owner: str | None,
    answers: Mapping[str, JsonValue],
) -> dict[str, Any]:
    """The ``CreateTaskResult`` of a task committed for this call.

    Raises:
        InvalidRequestError: the arguments do not fit (``-32602``: no task was created).
    """
    task = await submit(manager, workflow, arguments, owner=owner, answers=answers)
    return create_task_result(task)


def per_generation(legacy: Handler[P], modern: Handler[P]) -> Handler[P]:
    """One handler for a method both generations name (``tasks/get``, ``tasks/cancel``)."""

    async def handle(ctx: Context, params: P) -> dict[str, Any]:
        return await (modern if is_modern(ctx) else legacy)(ctx, params)

    return handle


class ModernTasks:
    """``tasks/get``, ``tasks/update`` and ``tasks/cancel`` for one connection's owner."""

    def __init__(self, manager: TaskManager, *, owner: str | None) -> None:
        self._manager = manager
        self._owner = owner

    async def get(self, ctx: Context, params: types.GetTaskRequestParams) -> dict[str, Any]:
        """The DetailedTask: result, error or outstanding input requests inlined."""
        _gate(ctx)
        return detailed_task(await self._manager.get(params.task_id, owner=self._owner))

    async def cancel(self, ctx: Context, params: types.CancelTaskRequestParams) -> dict[str, Any]:
        """Cancel the task if it still runs; the same empty ack if it already ended (its
        outcome stands)."""
        _gate(ctx)
        with contextlib.suppress(IllegalTransitionError):  # already terminal
            await self._manager.cancel(params.task_id, owner=self._owner, reason=CANCEL_REASON)
        return dict(ACK)

    async def update(self, ctx: Context, params: UpdateTaskParams) -> dict[str, Any]:
        """Apply the answers to pending questions, then ack. Keys the task is not waiting
        on are ignored; an answer that does not fit its question is ``-32602`` and leaves
        that question pending (the others are applied)."""
        if not is_modern(ctx):
            raise not_on_this_version(ctx.method, ctx.protocol_version)
        _gate(ctx)
        task = await self._manager.get(params.task_id, owner=self._owner)
        problems: list[str] = []
        for key, response in params.input_responses.items():
            question = task.input_requests.get(key)
            if question is not None:
                problem = await self._answer(task.id, key, question, response)
                if problem is not None:
                    problems.append(problem)
        if problems:
            raise MCPError(INVALID_PARAMS, "; ".join(problems))
        return dict(ACK)

    async def _answer(
        self, task_id: str, key: str, question: InputRequest, response: Any
    ) -> str | None:
        try:
            answer = types.ElicitResult.model_validate(response)
        except ValidationError:
            return f"inputResponses[{key!r}] is not an elicitation result ({{action, content}})"
        if answer.action != "accept":
            declined = answer.action == "decline"
            await refuse(
                self._manager,
                task_id,
                owner=self._owner,
                declined=declined,
                question=question.message,
            )
            return None
        try:
            await self._manager.provide_input(task_id, key, answer.content or {}, owner=self._owner)
        except InvalidAnswerError as error:
            return f"{error}; the question stays pending"
        except (InputNotRequestedError, TaskNotFoundError, TaskStateError):
            pass  # answered through another channel, or the task ended meanwhile
        return None


def _gate(ctx: Context) -> None:
    """The check every 2026 ``tasks/*`` request passes before its task is looked up."""
    if not declares_tasks_extension(ctx):
        raise missing_tasks_extension(ctx.method)
