"""Pushing to a client: the watched outgoing stream, progress, status notifications.

- :class:`Outbox` wraps a connection's write stream. A task's notifications must follow
  the ``CreateTaskResult`` that announced it, but the SDK writes a response after the
  handler has returned, with no hook; the Outbox tells when the response with a given
  request id has been handed to the transport (whose writes are ordered).
- :class:`ProgressPush` sends ``notifications/progress`` against a caller's token.
- :class:`TaskFollowers`: a task created on a 2025-11-25 connection is followed there
  until it ends: every change of its wire status becomes ``notifications/tasks/status``
  (the full Task, no related-task ``_meta``), and every advance of its progress a
  ``notifications/progress`` carrying the original call's ``progressToken`` (§2.13).
  Nothing is sent before the ``CreateTaskResult`` has gone out. Both are best effort:
  a requestor must still poll.
"""

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server.session import ServerSession
from mcp.shared._stream_protocols import WriteStream  # the SDK's transport protocol
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCResponse, RequestId

from taskloom.engine.events import TaskSubscription
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId
from taskloom.engine.states import TaskState
from taskloom.server.streams import ClosesOnExit
from taskloom.server.wire import WireStatus, legacy_task, wire_status

logger = logging.getLogger(__name__)


class Outbox(ClosesOnExit):
    """A write stream that signals when the response to a given request has gone out."""

    def __init__(self, inner: WriteStream[SessionMessage]) -> None:
        self._inner = inner
        self._awaited: dict[RequestId, list[Callable[[], None]]] = {}

    def on_response(self, request_id: RequestId, callback: Callable[[], None]) -> None:
        """Call *callback* once the response (result or error) to *request_id* is sent.

        Call it before the response can be written, i.e. from the request's handler.
        """
        self._awaited.setdefault(request_id, []).append(callback)

    async def send(self, item: SessionMessage, /) -> None:
        """Send *item*; if it answers an awaited request, signal that."""
        await self._inner.send(item)
        message = item.message
        if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id is not None:
            for callback in self._awaited.pop(message.id, ()):
                callback()

    async def aclose(self) -> None:
        """Close the underlying stream."""
        await self._inner.aclose()


class ResponseWatch(Protocol):
    """Tells when the response to a request has gone out (an :class:`Outbox`, or the
    embedded server's signal, ``taskloom.server.embedded``)."""

    def on_response(self, request_id: RequestId, callback: Callable[[], None]) -> None:
        """Call *callback* once the response to *request_id* is on its way."""


class ProgressPush:
    """Sends a task's progress against one progress token, only when it advances
    (MCP requires each notification's ``progress`` to be larger than the last), and on
    request a keepalive that advances it a little (see :meth:`keepalive`)."""

    def __init__(
        self,
        session: ServerSession,
        token: types.ProgressToken | None,
        *,
        related_request_id: types.RequestId | None = None,
    ) -> None:
        self._session = session
        self.token = token
        self._related = related_request_id
        self._last: float | None = None
        self._settled = 0.0
        """The task's own progress when last sent (keepalives count up from it)."""
        self._beats = 0
        self.sent_at: float | None = None
        """When (``anyio.current_time``) the last notification was sent."""

    async def update(self, task: Task) -> None:
        """Notify if *task*'s progress went further than last time."""
        progress = task.progress
        if self.token is None or progress is None:
            return
        if self._last is not None and progress.completed <= self._last:
            return
        self._settled, self._beats = progress.completed, 0
        await self._send(progress.completed, progress.total, task.status_message)

    async def keepalive(self, task: Task) -> None:
        """Notify although *task*'s progress has not advanced, so a host that resets its
        timeout on progress keeps waiting. The value moves toward the next whole unit
        (``n/(n+1)`` of the way after *n* keepalives) and never reaches it, so each is
        larger than the last and the task's next real advance is larger still."""
        total = task.progress.total if task.progress is not None else None
        ceiling = self._settled + 1 if total is None else min(self._settled + 1, total)
        if self.token is None or ceiling <= self._settled:
            return
        self._beats += 1
        value = self._settled + (ceiling - self._settled) * self._beats / (self._beats + 1)
        if self._last is None or value > self._last:
            await self._send(value, total, task.status_message)

    async def _send(self, value: float, total: float | None, message: str | None) -> None:
        if self.token is None:
            return
        self._last = value
        self.sent_at = anyio.current_time()
        params = types.ProgressNotificationParams(
            progress_token=self.token, progress=value, total=total, message=message
        )
        await self._session.send_notification(
            types.ProgressNotification(params=params), related_request_id=self._related
        )


async def push_status(session: ServerSession, task: Task) -> None:
    """Send ``notifications/tasks/status`` with *task* on the connection's own channel."""
    params = types.TaskStatusNotificationParams.model_validate(legacy_task(task))
    notification = types.TaskStatusNotification(params=params)
    await session.send_notification(notification)  # type: ignore[arg-type]  # not in the SDK's union


@dataclass
class _Followed:
    """One followed task: where its notifications go, and how far they got."""

    session: ServerSession
    progress: ProgressPush
    announced: WireStatus
    latest: Task
    answered: bool
    reported: int = 0
    """The version last reported (0: none yet)."""


class TaskFollowers:
    """The tasks created on one connection, followed on this process's change feed.

    One subscription and one task serve the whole connection (opened with its first
    create, closed when no task is followed and none is being created), so a
    connection following thousands of tasks costs every change in the process one
    offer, not thousands. A change that reaches the connection's subscription while a
    create is in flight is kept until every create that was in flight then has
    returned: it may be the change of a task being created (committed before the task
    could be followed), or of a task a create with a held idempotency key read before
    that change and returns (followed already, or ended and dropped since), which is
    then not missed. One
    subscription serves every create, so a change costs one offer however many creates
    are in flight (a subscription per create cost each change one offer per create).
    """

    def __init__(
        self,
        manager: TaskManager,
        outbox: ResponseWatch,
        task_group: TaskGroup,
    ) -> None:
        self._manager = manager
        self._outbox = outbox
        self._task_group = task_group
        self._followed: dict[str, _Followed] = {}
        self._feed: TaskSubscription | None = None
        self._started = 0
        """How many creates have started on this connection (each one's number)."""
        self._creating: dict[int, None] = {}
        """The numbers of the creates in flight, oldest first."""
        self._early: dict[str, tuple[int, Task]] = {}
        """Changes received while creates were in flight (of any task, followed or not):
        by task, the newest version and the number of the newest create started when
        it came, in the order they came (so the numbers never decrease)."""

    @property
    def following(self) -> int:
        """How many tasks are followed now."""
        return len(self._followed)

    @property
    def kept(self) -> int:
        """How many changes are kept for the creates in flight."""
        return len(self._early)

    async def create_and_follow(
        self,
        create: Callable[[], Awaitable[Task]],
        *,
        session: ServerSession,
        request_id: types.RequestId | None,
        progress_token: types.ProgressToken | None,
    ) -> Task:
        """Create a task with *create* in the request *request_id*, whose response has
        not been sent yet, and follow it from its creation on; return it.

        Nothing is sent about the task before that response has gone out, and no change
        is missed: the connection's subscription is open from before the create on,
        and what it delivers of the task before the task is followed is kept for it.
        """
        self._started += 1
        number = self._started
        self._creating[number] = None
        if self._feed is None:
            self._feed = self._manager.subscribe(wants=self._wants)
            self._task_group.start_soon(self._dispatch, self._feed)
        try:
            task = await create()
        except BaseException:
            del self._creating[number]
            self._forget_early()
            raise
        del self._creating[number]
        kept = self._early.pop(task.id, None)
        self._follow(task, session, request_id, progress_token)
        if kept is not None:
            self._changed(kept[1])  # the subscription keeps the newer of the two
        self._forget_early()
        return task

    def _wants(self, task_id: TaskId, _state: TaskState) -> bool:
        """Whether another process's change of *task_id* may concern this connection."""
        return bool(self._creating) or task_id in self._followed

    def _forget_early(self) -> None:
        """Drop the kept changes no create in flight can need (all when none is), and
        close the subscription if nothing is followed or being created any more."""
        if not self._creating:
            self._early.clear()
            if not self._followed and self._feed is not None:
                self._feed.close()  # its dispatcher ends (a create that failed)
                self._feed = None
            return
        oldest = next(iter(self._creating))
        early = self._early
        while early:
            task_id, (number, _) = next(iter(early.items()))
            if number >= oldest:
                return
            del early[task_id]

    def _keep_early(self, task: Task) -> None:
        """Keep *task* for the creates in flight: one may return its task as it read
        it before this version (a new task, or one holding its idempotency key)."""
        kept = self._early.pop(task.id, None)
        if kept is not None and kept[1].version > task.version:
            task = kept[1]
        self._early[task.id] = (self._started, task)  # at the end: numbers stay in order

    def _follow(
        self,
        task: Task,
        session: ServerSession,
        request_id: types.RequestId | None,
        token: types.ProgressToken | None,
    ) -> None:
        followed = _Followed(
            session=session,
            progress=ProgressPush(session, token),
            announced=wire_status(task.state),
            latest=task,
            answered=request_id is None,
        )
        self._followed[task.id] = followed
        if request_id is not None:
            self._outbox.on_response(request_id, partial(self._answered, task.id))
        self._changed(task)  # reported as created once the response is out

    def _answered(self, task_id: str) -> None:
        followed = self._followed.get(task_id)
        if followed is not None:
            followed.answered = True
            self._changed(followed.latest)

    def _changed(self, task: Task) -> None:
        """Hand *task* (a version of a followed task) to the dispatcher."""
        if self._feed is not None:
            self._feed.offer(task)

    async def _dispatch(self, feed: TaskSubscription) -> None:
        """Report the followed tasks' changes until none is followed any more."""
        with feed:
            while self._followed or self._creating:
                try:
                    changed = await feed.receive()
                except anyio.EndOfStream:  # closed: a create failed, nothing is followed
                    return
                if self._creating:  # a create may return this task as read before it
                    self._keep_early(changed)
                followed = self._followed.get(changed.id)
                if followed is None:  # another connection's task, or one being created
                    continue
                if changed.version > followed.latest.version:
                    followed.latest = changed
                if followed.answered:  # else held until the response is out
                    await self._report(changed.id, followed)
        if self._feed is feed:
            self._feed = None

    async def _report(self, task_id: str, followed: _Followed) -> None:
        current = followed.latest
        if current.version <= followed.reported:
            return
        followed.reported = current.version
        try:
            await followed.progress.update(current)
            if wire_status(current.state) != followed.announced:
                followed.announced = wire_status(current.state)
                await push_status(followed.session, current)
        except Exception:
            logger.exception("following task %s failed", task_id)
            self._followed.pop(task_id, None)
            return
        if current.is_terminal:
            self._followed.pop(task_id, None)
