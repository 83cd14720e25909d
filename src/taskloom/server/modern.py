"""The 2026-07-28 tasks extension (SEP-2663): server-directed tasks, ``tasks/*`` and push.

Every request is judged on its own ``_meta`` (2026 has no sessions). A ``tools/call``
of a workflow becomes a task exactly when that request declared the extension (ADR
0010: ``optional`` and ``required`` alike; ``required`` without it is ``-32021``;
``forbidden`` never, ADR 0019); the ``CreateTaskResult`` is answered once the task is
committed. ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` reach these handlers only
when the request declared the extension (``-32021``, ``middleware.check_generation``) and,
over HTTP, named the task in ``Mcp-Name`` (``-32020``, ``middleware.check_task_routing``,
in that order); then the task must be visible to the owner (``-32602``).
``tasks/result`` and ``tasks/list`` do not exist here (``-32601``,
``middleware.check_generation``).

Push: ``subscriptions/listen`` with ``notifications.taskIds``. A listen request's
response is its stream (SEP-2575). The first frame acknowledges the task ids it covers
(the caller's own tasks among those asked for; others are silently left out, as an
unknown id would be). Then each covered task is sent once as it is now, and again
whenever its status or its outstanding questions change, as ``notifications/tasks``
carrying the DetailedTask ``tasks/get`` would answer and the stream's
``subscriptionId``. The stream ends (its result is sent) once every covered task is
terminal. Best effort, like every push: changes are seen on this process's change feed;
polling ``tasks/get`` remains the contract. No progress or message notifications travel
on it (SEP-2663).
"""

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import INVALID_PARAMS, INVALID_REQUEST
from pydantic import Field, PrivateAttr, ValidationError, model_serializer

from taskloom.engine.dag import Workflow
from taskloom.engine.errors import (
    IllegalTransitionError,
    InputNotRequestedError,
    InvalidAnswerError,
    TaskNotFoundError,
    TaskStateError,
)
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import InputRequest, Task
from taskloom.server import audit
from taskloom.server.errors import missing_tasks_extension
from taskloom.server.generation import declares_tasks_extension
from taskloom.server.questions import refuse
from taskloom.server.wire import detailed_task, modern_create_task_result, modern_status

CANCEL_REASON: Final = "cancelled by the requestor"
ACK: Final = {"resultType": "complete"}
Context = ServerRequestContext[Any, Any]


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


async def start_directed(submission: Callable[[], Awaitable[Task]]) -> dict[str, Any]:
    """The ``CreateTaskResult`` of the task *submission* commits for this call (or of the
    task holding its idempotency key).

    Raises:
        InvalidRequestError: the arguments do not fit (``-32602``: no task was created).
        IdempotencyConflictError: the key holds another call's task (``-32602``).
        QuotaExceededError: the owner has its most unfinished tasks (``-32031``).
    """
    return modern_create_task_result(await submission())


class ModernTasks:
    """``tasks/get``, ``tasks/update`` and ``tasks/cancel`` for one connection's owner."""

    def __init__(self, manager: TaskManager, *, owner: str | None) -> None:
        self._manager = manager
        self._owner = owner

    async def get(self, ctx: Context, params: types.GetTaskRequestParams) -> dict[str, Any]:
        """The DetailedTask: result, error or outstanding input requests inlined."""
        return detailed_task(await self._manager.get(params.task_id, owner=self._owner))

    async def cancel(self, ctx: Context, params: types.CancelTaskRequestParams) -> dict[str, Any]:
        """Cancel the task if it still runs; the same empty ack if it already ended (its
        outcome stands)."""
        with contextlib.suppress(IllegalTransitionError):  # already terminal
            await self._manager.cancel(params.task_id, owner=self._owner, reason=CANCEL_REASON)
        return dict(ACK)

    async def update(self, ctx: Context, params: UpdateTaskParams) -> dict[str, Any]:
        """Apply the answers to pending questions, then ack. Keys the task is not waiting
        on are ignored; an answer that does not fit its question is ``-32602`` and leaves
        that question pending (the others are applied)."""
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


# -- subscriptions/listen ---------------------------------------------------------

MAX_TASK_IDS: Final = 100
"""Most task ids one listen stream may cover."""
TASK_IDS_KEY: Final = "taskIds"


class _AsBuilt(types.NotificationParams):
    """Notification params sent exactly as built: the SDK dumps notifications with
    ``exclude_none``, which would drop the ``ttlMs: null`` of unlimited retention."""

    _wire: dict[str, Any] = PrivateAttr(default_factory=dict)

    @classmethod
    def of(cls, wire: dict[str, Any]) -> "_AsBuilt":
        """Params that dump as *wire*."""
        params = cls()
        params._wire = wire
        return params

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        return self._wire


class TasksNotification(types.Notification[_AsBuilt, Literal["notifications/tasks"]]):
    """``notifications/tasks``: a DetailedTask, on a listen stream."""

    method: Literal["notifications/tasks"] = "notifications/tasks"
    params: _AsBuilt


def tasks_notification(task: Task, meta: dict[str, Any]) -> TasksNotification:
    """The notification for *task* as it is now, tagged with the stream's *meta*."""
    wire = {key: value for key, value in detailed_task(task).items() if key != "resultType"}
    return TasksNotification(
        params=_AsBuilt.of({**wire, "_meta": {**wire.get("_meta", {}), **meta}})
    )


class TaskListen:
    """The ``subscriptions/listen`` handler of one connection's owner."""

    def __init__(self, manager: TaskManager, *, owner: str | None) -> None:
        self._manager = manager
        self._owner = owner

    async def listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """Serve one stream (see the module docstring); its result when it ends."""
        task_ids = requested_task_ids(params.notifications)
        if task_ids and not declares_tasks_extension(ctx):
            raise missing_tasks_extension("subscriptions/listen with notifications.taskIds")
        if ctx.request_id is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
        with self._manager.subscribe(task_ids) as changes:  # before reading: nothing missed
            covered = await self._visible(task_ids)
            visible = {task.id for task in covered}
            audit.looked_up({task_id: task_id in visible for task_id in task_ids})
            ack = types.SubscriptionsAcknowledgedNotificationParams(
                notifications=types.SubscriptionFilter.model_validate(
                    {TASK_IDS_KEY: [task.id for task in covered]}
                ),
                _meta=meta,
            )
            await ctx.session.send_notification(
                types.SubscriptionsAcknowledgedNotification(params=ack),
                related_request_id=ctx.request_id,
            )
            shown: dict[str, tuple[str, tuple[str, ...]]] = {}
            for task in covered:
                shown[task.id] = await self._push(ctx, task, meta)
            open_ids = {task.id for task in covered if not task.is_terminal}
            while open_ids:
                task = await changes.receive()
                if task.id not in open_ids or _view(task) == shown[task.id]:
                    continue
                shown[task.id] = await self._push(ctx, task, meta)
                if task.is_terminal:
                    open_ids.discard(task.id)
        return types.SubscriptionsListenResult(_meta=meta)

    async def _visible(self, task_ids: list[str]) -> list[Task]:
        found = []
        for task_id in task_ids:
            try:
                found.append(await self._manager.get(task_id, owner=self._owner))
            except TaskNotFoundError:
                continue
        return found

    async def _push(
        self, ctx: ServerRequestContext[Any, Any], task: Task, meta: dict[str, Any]
    ) -> tuple[str, tuple[str, ...]]:
        notification = tasks_notification(task, meta)
        await ctx.session.send_notification(
            notification,  # type: ignore[arg-type]  # not in the SDK's union
            related_request_id=ctx.request_id,
        )
        return _view(task)


def requested_task_ids(notifications: types.SubscriptionFilter) -> list[str]:
    """The distinct task ids a listen request asks for, in order.

    Raises:
        MCPError: ``taskIds`` is not a list of at most ``MAX_TASK_IDS`` strings.
    """
    raw = (notifications.model_extra or {}).get(TASK_IDS_KEY)
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(item, str) and item for item in raw):
        raise MCPError(INVALID_PARAMS, "notifications.taskIds must be a list of task ids")
    if len(raw) > MAX_TASK_IDS:
        raise MCPError(INVALID_PARAMS, f"notifications.taskIds may name at most {MAX_TASK_IDS}")
    return list(dict.fromkeys(raw))


def _view(task: Task) -> tuple[str, tuple[str, ...]]:
    """What a listener is told about: the status and the questions outstanding."""
    return modern_status(task), tuple(task.input_requests)
