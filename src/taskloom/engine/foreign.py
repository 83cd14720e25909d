"""Changes made by other processes, found by polling a store that cannot announce them
(SQLite; PostgreSQL announces them with NOTIFY).

Every *interval_s* the store's running tasks and their versions are read (as many as the
workers run at once, however long the queue; from an index); a task whose version moved
past what this process last saw, one that is new, and one that left the set (it ended,
went back to the queue or waits for an answer, or was deleted) is published on this
process's change feed as this process's own writes are. So a worker stops the nodes of a
run that another process cancelled within about *interval_s*, its log shows the cancel,
and the dashboard redraws. This process's own writes are learnt
from the feed, and not published twice; a task they ended is not read again when it leaves
the running set (a final state: nothing another process does can change it).
"""

from collections.abc import Awaitable, Callable
from typing import Final

import anyio
from anyio.abc import TaskStatus

from taskloom.engine.errors import PersistenceError, TaskNotFoundError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import TaskId
from taskloom.engine.states import TaskState, is_terminal

DEFAULT_INTERVAL_S: Final = 0.25
"""How often a local store is polled: a cancel from another process reaches the running
nodes in well under a second (ADR 0042; measured by ``bench/bench_cross_process_cancel.py``)."""

ReadVersions = Callable[[], Awaitable[dict[TaskId, int]]]


async def follow_foreign_changes(
    manager: TaskManager,
    read_versions: ReadVersions,
    interval_s: float = DEFAULT_INTERVAL_S,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Publish on *manager*'s feed what other processes change, until cancelled. Start it
    with ``task_group.start``: it reports started once it knows the first state."""
    seen: dict[TaskId, int] = {}
    """The newest version of each task this process knows of (its own writes, and what
    earlier polls found), kept for the running tasks and those written since the last
    poll (so it does not grow with every task this process ever wrote)."""
    fresh: set[TaskId] = set()
    running_here: set[TaskId] = set()
    """Tasks this process's own writes left running (its worker's claims): one cancelled
    by another process before any poll saw it running has ended all the same."""
    ended_here: set[TaskId] = set()
    """Tasks this process's own writes ended (kept as long as ``seen`` keeps them): their
    state is final, so a poll that finds them gone from the running set need not read
    them again (no other process can change them; their versions are known)."""
    with manager.subscribe() as own:

        async def learn() -> None:
            async for task in own:
                fresh.add(task.id)
                if task.version > seen.get(task.id, 0):
                    seen[task.id] = task.version
                    if task.state is TaskState.RUNNING:
                        running_here.add(task.id)
                    else:
                        running_here.discard(task.id)
                        if is_terminal(task.state):
                            ended_here.add(task.id)

        async with anyio.create_task_group() as group:
            group.start_soon(learn)
            active = await _read(read_versions) or {}
            seen.update(active)
            task_status.started()
            while True:
                await anyio.sleep(interval_s)
                current = await _read(read_versions)
                if current is None:
                    continue  # the store did not answer: the next poll tries again
                moved = [
                    task_id
                    for task_id, version in current.items()
                    if version > seen.get(task_id, 0)
                ]
                ended = [
                    task_id
                    for task_id in active.keys() | running_here
                    if task_id not in current and task_id not in ended_here
                ]
                running_here.difference_update(ended)
                for task_id in [*moved, *ended]:
                    await _publish(manager, task_id, seen)
                for task_id, version in current.items():
                    seen[task_id] = max(version, seen.get(task_id, 0))
                for task_id in [each for each in seen if each not in current]:
                    if task_id not in fresh:
                        del seen[task_id]
                        ended_here.discard(task_id)
                fresh.clear()
                active = current


async def _publish(manager: TaskManager, task_id: TaskId, seen: dict[TaskId, int]) -> None:
    """Publish *task_id* as it is now, unless this process knows that version already."""
    try:
        task = await manager.get(task_id)
    except (TaskNotFoundError, PersistenceError):
        return  # deleted or expired, or the store did not answer: nothing to tell
    if task.version > seen.get(task_id, 0):
        seen[task_id] = task.version
        manager.feed.publish(task)


async def _read(read_versions: ReadVersions) -> dict[TaskId, int] | None:
    try:
        return await read_versions()
    except PersistenceError:
        return None
