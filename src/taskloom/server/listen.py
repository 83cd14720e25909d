"""``subscriptions/listen`` with ``notifications.taskIds``: 2026-07-28 task push.

A listen request's response is its stream (SEP-2575). The first frame acknowledges the
task ids it covers (the caller's own tasks among those asked for; others are silently
left out, as an unknown id would be). Then each covered task is sent once as it is now,
and again whenever its status or its outstanding questions change, as
``notifications/tasks`` carrying the DetailedTask ``tasks/get`` would answer and the
stream's ``subscriptionId``. The stream ends (its result is sent) once nothing it covers
can change: every covered task is terminal. Best effort, like every push: changes are
seen on this process's change feed; polling ``tasks/get`` remains the contract. No
progress or message notifications travel on it (SEP-2663).
"""

from typing import Any, Final, Literal

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import INVALID_PARAMS, INVALID_REQUEST
from pydantic import PrivateAttr, model_serializer

from taskloom.engine.errors import TaskNotFoundError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.server.errors import missing_tasks_extension
from taskloom.server.protocol import declares_tasks_extension
from taskloom.server.status import modern_status
from taskloom.server.wire_modern import detailed_task

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
    return TasksNotification(params=_AsBuilt.of({**wire, "_meta": meta}))


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
