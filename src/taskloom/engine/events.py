"""In-process change notifications: every committed task change, fanned out to subscribers.

A subscription keeps only the newest version of each task it has not yet delivered, so a
slow subscriber costs memory bounded by the number of distinct tasks that changed, never
blocks a writer, and never misses a task's latest (e.g. terminal) state.
"""

from collections.abc import Callable, Iterable
from typing import Final, Self

import anyio

from taskloom.engine.models import Task, TaskId
from taskloom.engine.states import TaskState

RELEASED: Final = "released"
"""What a store announces, in place of a new state, of a run another process's worker
handed back (its lease given up while the task still runs: a worker stopping, a run
stopped by an error or by the fence): no row of the task changed, and the run is
claimable at once (``TaskManager.notice``, ADR 0066)."""

Wants = Callable[[TaskId, TaskState], bool]
"""Which changes of other processes a subscription to all tasks needs: given a task's id
and its new state, whether this process must read the task to deliver it."""


class TaskSubscription:
    """A stream of task snapshots, newest version per task, in order of first change."""

    def __init__(
        self, feed: "ChangeFeed", task_ids: Iterable[TaskId] | None, wants: Wants | None = None
    ) -> None:
        self._feed = feed
        self.wants = wants
        """See :meth:`ChangeFeed.subscribe`."""
        self._task_ids: frozenset[TaskId] | None = (
            frozenset(task_ids) if task_ids is not None else None
        )
        self._pending: dict[TaskId, Task] = {}
        self._waiter: anyio.Event | None = None
        """Set on the next change; made only when a receiver has to wait."""
        self._closed = False

    def offer(self, task: Task) -> None:
        """Queue *task* for delivery unless filtered out or superseded. Never blocks."""
        if self._closed or (self._task_ids is not None and task.id not in self._task_ids):
            return
        self._push(task)

    @property
    def task_ids(self) -> frozenset[TaskId] | None:
        """The tasks this subscription follows; ``None`` for all."""
        return self._task_ids

    def _push(self, task: Task) -> None:
        """Queue *task* (known to interest this open subscription) unless superseded."""
        pending = self._pending
        queued = pending.get(task.id)
        if queued is None:
            pending[task.id] = task
            self._wake()
        elif queued.version < task.version:
            pending[task.id] = task

    def _wake(self) -> None:
        """Wake the receivers waiting, if any."""
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            waiter.set()

    async def receive(self) -> Task:
        """The next changed task, waiting for one if needed.

        Raises:
            anyio.EndOfStream: the subscription was closed.
        """
        while not self._pending:
            if self._closed:
                raise anyio.EndOfStream
            if self._waiter is None:
                self._waiter = anyio.Event()
            await self._waiter.wait()
        task_id = next(iter(self._pending))
        return self._pending.pop(task_id)

    def pending(self, task_id: TaskId) -> bool:
        """Whether a change of *task_id* waits to be received."""
        return task_id in self._pending

    @property
    def pending_count(self) -> int:
        """How many changed tasks wait to be received."""
        return len(self._pending)

    def close(self) -> None:
        """Stop receiving; a waiting :meth:`receive` ends with ``EndOfStream``."""
        self._closed = True
        self._pending.clear()
        self._feed.remove(self)
        self._wake()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Task:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ChangeFeed:
    """Fans committed task changes out to subscriptions in the same process.

    Subscriptions to all tasks are kept apart from those to some tasks (indexed by task
    id), so a change costs one offer per interested subscription, however many other
    tasks are watched.
    """

    def __init__(self) -> None:
        self._subscriptions: set[TaskSubscription] = set()
        self._everything: dict[TaskSubscription, None] = {}
        self._by_task: dict[TaskId, dict[TaskSubscription, None]] = {}

    def subscribe(
        self, task_ids: Iterable[TaskId] | None = None, *, wants: Wants | None = None
    ) -> TaskSubscription:
        """A new subscription to all tasks, or only to *task_ids*. Close it when done.

        *wants* (for all tasks) says which changes made by other processes it needs
        (:meth:`wanted`); every change made in this process is delivered regardless."""
        subscription = TaskSubscription(self, task_ids, wants)
        self._subscriptions.add(subscription)
        ids = subscription.task_ids
        if ids is None:
            self._everything[subscription] = None
        else:
            for task_id in ids:
                self._by_task.setdefault(task_id, {})[subscription] = None
        return subscription

    def publish(self, task: Task) -> None:
        """Deliver *task* to every interested subscription. Never blocks."""
        for subscription in tuple(self._everything):
            subscription._push(task)
        watching = self._by_task.get(task.id)
        if watching is not None:
            for subscription in tuple(watching):
                subscription._push(task)

    def wanted(self, task_id: TaskId, state: TaskState) -> bool:
        """Whether a subscription needs the change of *task_id* to *state* that another
        process announced: one follows that task, or follows all tasks without a
        ``wants`` or with one that says yes. When none does, the task need not be read."""
        if task_id in self._by_task:
            return True
        return any(
            subscription.wants is None or subscription.wants(task_id, state)
            for subscription in self._everything
        )

    def remove(self, subscription: TaskSubscription) -> None:
        """Forget *subscription* (called by its ``close``)."""
        if subscription not in self._subscriptions:
            return
        self._subscriptions.discard(subscription)
        ids = subscription.task_ids
        if ids is None:
            self._everything.pop(subscription, None)
            return
        for task_id in ids:
            watching = self._by_task.get(task_id)
            if watching is not None:
                watching.pop(subscription, None)
                if not watching:
                    del self._by_task[task_id]

    @property
    def subscriber_count(self) -> int:
        """How many subscriptions are open."""
        return len(self._subscriptions)
