"""Pushing task changes to a client: progress against the caller's token, and statuses.

A task created on a connection is followed there until it ends: every change of its
wire status becomes ``notifications/tasks/status`` (the full Task, no related-task
``_meta``), and every advance of its progress a ``notifications/progress`` carrying the
original call's ``progressToken`` (2025-11-25 §2.13). Nothing is sent before the
``CreateTaskResult`` has gone out. Both are best effort: a requestor must still poll.
"""

import logging
from contextlib import aclosing

import anyio
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp.server.session import ServerSession

from taskloom.engine.errors import TaskloomError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.server.outbox import Outbox
from taskloom.server.status import WireStatus, wire_status
from taskloom.server.wire_legacy import legacy_task

logger = logging.getLogger(__name__)


class ProgressPush:
    """Sends a task's progress against one progress token, only when it advances
    (MCP requires each notification's ``progress`` to be larger than the last)."""

    def __init__(
        self,
        session: ServerSession,
        token: types.ProgressToken | None,
        *,
        related_request_id: types.RequestId | None = None,
    ) -> None:
        self._session = session
        self._token = token
        self._related = related_request_id
        self._last: float | None = None

    async def update(self, task: Task) -> None:
        """Notify if *task*'s progress went further than last time."""
        progress = task.progress
        if self._token is None or progress is None:
            return
        if self._last is not None and progress.completed <= self._last:
            return
        self._last = progress.completed
        params = types.ProgressNotificationParams(
            progress_token=self._token,
            progress=progress.completed,
            total=progress.total,
            message=task.status_message,
        )
        await self._session.send_notification(
            types.ProgressNotification(params=params), related_request_id=self._related
        )


async def push_status(session: ServerSession, task: Task) -> None:
    """Send ``notifications/tasks/status`` with *task* on the connection's own channel."""
    params = types.TaskStatusNotificationParams.model_validate(legacy_task(task))
    notification = types.TaskStatusNotification(params=params)
    await session.send_notification(notification)  # type: ignore[arg-type]  # not in the SDK's union


class TaskFollowers:
    """The tasks created on one connection, each followed by a task of its group, on
    this process's change feed."""

    def __init__(
        self,
        manager: TaskManager,
        outbox: Outbox,
        task_group: TaskGroup,
    ) -> None:
        self._manager = manager
        self._outbox = outbox
        self._task_group = task_group

    async def follow(
        self,
        task: Task,
        *,
        session: ServerSession,
        request_id: types.RequestId | None,
        progress_token: types.ProgressToken | None,
    ) -> None:
        """Start following *task*, created by the request *request_id* whose response
        has not been sent yet; returns once no change can be missed any more."""
        answered = self._outbox.expect_response(request_id) if request_id is not None else None
        await self._task_group.start(self._follow, task, session, answered, progress_token)

    async def _follow(
        self,
        task: Task,
        session: ServerSession,
        answered: anyio.Event | None,
        token: types.ProgressToken | None,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        announced: WireStatus = wire_status(task.state)
        progress = ProgressPush(session, token)
        started = False

        async def report(current: Task) -> None:
            nonlocal announced
            await progress.update(current)
            if wire_status(current.state) != announced:
                announced = wire_status(current.state)
                await push_status(session, current)

        try:
            # The change feed only, no periodic store reads: a connection may follow
            # thousands of tasks, and notifications are best effort (polling is the
            # contract). Changes made by other processes reach this feed once it is
            # fed across processes (e.g. PostgreSQL LISTEN/NOTIFY).
            watch = self._manager.watch(task.id)
            async with aclosing(watch) as snapshots:
                current = await anext(snapshots)  # subscribed: no later change is missed
                task_status.started()
                started = True
                if answered is not None:
                    await answered.wait()
                await report(current)
                async for current in snapshots:
                    await report(current)
        except TaskloomError as error:  # e.g. the task expired and was purged
            logger.debug("stopped following task %s: %s", task.id, error)
        except Exception:
            logger.exception("following task %s failed", task.id)
        finally:
            if not started:
                task_status.started()
