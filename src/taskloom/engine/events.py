"""In-process change notifications: every committed task change, fanned out to subscribers.

A subscription keeps only the newest version of each task it has not yet delivered, so a
slow subscriber costs memory bounded by the number of distinct tasks that changed, never
blocks a writer, and never misses a task's latest (e.g. terminal) state.
"""

from collections.abc import Iterable
from types import TracebackType
from typing import Self

import anyio

from taskloom.engine.models import Task, TaskId


class TaskSubscription:
    """A stream of task snapshots, newest version per task, in order of first change."""

    def __init__(self, feed: "ChangeFeed", task_ids: Iterable[TaskId] | None) -> None:
        self._feed = feed
        self._task_ids = frozenset(task_ids) if task_ids is not None else None
        self._pending: dict[TaskId, Task] = {}
        self._wakeup = anyio.Event()
        self._closed = False

    def offer(self, task: Task) -> None:
        """Queue *task* for delivery unless filtered out or superseded. Never blocks."""
        if self._closed or (self._task_ids is not None and task.id not in self._task_ids):
            return
        queued = self._pending.get(task.id)
        if queued is None or queued.version < task.version:
            self._pending[task.id] = task
        self._wakeup.set()

    async def receive(self) -> Task:
        """The next changed task, waiting for one if needed.

        Raises:
            anyio.EndOfStream: the subscription was closed.
        """
        while not self._pending:
            if self._closed:
                raise anyio.EndOfStream
            await self._wakeup.wait()
            self._wakeup = anyio.Event()
        task_id = next(iter(self._pending))
        return self._pending.pop(task_id)

    @property
    def pending_count(self) -> int:
        """How many changed tasks wait to be received."""
        return len(self._pending)

    def close(self) -> None:
        """Stop receiving; a waiting :meth:`receive` ends with ``EndOfStream``."""
        self._closed = True
        self._pending.clear()
        self._feed.remove(self)
        self._wakeup.set()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Task:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ChangeFeed:
    """Fans committed task changes out to subscriptions in the same process."""

    def __init__(self) -> None:
        self._subscriptions: set[TaskSubscription] = set()

    def subscribe(self, task_ids: Iterable[TaskId] | None = None) -> TaskSubscription:
        """A new subscription to all tasks, or only to *task_ids*. Close it when done."""
        subscription = TaskSubscription(self, task_ids)
        self._subscriptions.add(subscription)
        return subscription

    def publish(self, task: Task) -> None:
        """Deliver *task* to every interested subscription. Never blocks."""
        for subscription in tuple(self._subscriptions):
            subscription.offer(task)

    def remove(self, subscription: TaskSubscription) -> None:
        """Forget *subscription* (called by its ``close``)."""
        self._subscriptions.discard(subscription)

    @property
    def subscriber_count(self) -> int:
        """How many subscriptions are open."""
        return len(self._subscriptions)
