"""Which open pages a change concerns: the engine's change feed and node events, fanned
out to the dashboard's Server-Sent Event streams.

Task changes come from the manager's change feed (every committed change of this
process, and of others on PostgreSQL); node attempts starting and ending come from the
engine's observer events (the runner writes no task change when a node starts). A
listener is only woken: its stream then reads what it shows and sends it if it changed.
A list's listener is woken only by changes of tasks its viewer sees (the change feed
names each task's owner), so one principal's stream never stirs for another's tasks;
node events concern a task's page only (a list shows no node). Another process's change
(PostgreSQL's NOTIFY) is read only while a page is open: a server with no page open
reads none of them for the dashboard.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio

from taskloom.engine.manager import ANY_OWNER, OwnerScope, TaskManager
from taskloom.engine.models import TaskId
from taskloom.engine.observe import AttemptEnd, AttemptInfo, NullObserver, RunInfo
from taskloom.engine.states import TaskState


@dataclass(eq=False)
class Listener:
    """One open stream: the task it follows (``None``: any task of *owner*), woken on a
    change."""

    task_id: str | None
    owner: OwnerScope = ANY_OWNER
    """Whose tasks a list listener sees (a principal, ``None``: the local user, or all)."""
    _woken: anyio.Event = field(default_factory=anyio.Event)

    def wake(self) -> None:
        """Something it may show changed."""
        self._woken.set()

    async def wait(self) -> None:
        """Until woken (since the last wait)."""
        await self._woken.wait()
        self._woken = anyio.Event()


class ChangeHub(NullObserver):
    """Wakes the listeners a task change or a node event concerns."""

    def __init__(self) -> None:
        self._listeners: set[Listener] = set()

    @contextmanager
    def listen(
        self, task_id: str | None = None, owner: OwnerScope = ANY_OWNER
    ) -> Iterator[Listener]:
        """A listener for *task_id*'s changes (or those of every task *owner* sees),
        while the block runs."""
        listener = Listener(task_id, owner)
        self._listeners.add(listener)
        try:
            yield listener
        finally:
            self._listeners.discard(listener)

    def changed(self, task_id: str, owner: str | None) -> None:
        """*owner*'s task *task_id* changed: wake its listeners, and the lists that see it."""
        for listener in self._listeners:
            if listener.task_id == task_id or (
                listener.task_id is None and listener.owner in (ANY_OWNER, owner)
            ):
                listener.wake()

    def node_changed(self, task_id: str) -> None:
        """A node of *task_id* started or ended: wake that task's listeners only."""
        for listener in self._listeners:
            if listener.task_id == task_id:
                listener.wake()

    def wants(self, _task_id: TaskId, _state: TaskState) -> bool:
        """Whether another process's change must be read for the open pages: while one
        is open, any may concern it (a task's page lists its children, a list its
        viewer's tasks); with none open, no page needs it (one that opens reads anew)."""
        return bool(self._listeners)

    async def follow(self, manager: TaskManager) -> None:
        """Relay every change of *manager*'s feed, until cancelled."""
        with manager.subscribe(wants=self.wants) as changes:
            while True:
                task = await changes.receive()
                self.changed(task.id, task.owner)
                if task.parent_id is not None:  # its page lists its children
                    self.changed(task.parent_id, task.owner)

    def run_started(self, run: RunInfo) -> None:
        """A run started: its page shows it."""
        self.node_changed(run.task_id)

    def attempt_started(self, attempt: AttemptInfo) -> None:
        """A node started: its task's page shows it."""
        self.node_changed(attempt.task_id)

    def attempt_ended(self, attempt: AttemptInfo, end: AttemptEnd) -> None:
        """A node attempt ended: its task's page shows it."""
        self.node_changed(attempt.task_id)
