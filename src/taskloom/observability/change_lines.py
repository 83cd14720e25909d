"""One line on stderr each time a task this process runs changes state: the text log of
``taskloom worker`` and of a lingering worker (ADR 0040).

Only the runs of this process's worker are printed: its own changes (claims, ends, waits)
and those other processes make to them (a cancel, which the worker reads to stop the
nodes). Another process's tasks are neither printed nor read for the log: on PostgreSQL
every worker used to read every task change the database announced (ADR 0050 noted it).

A run is followed while the worker executes it, and until its last line: the change
that made it leave (its end, its wait for an answer), if it made one. A run that leaves
without one (a lost lease, a dropped run, a stopping worker) is forgotten at once, so a
later change made elsewhere is not printed, and a claim of it by this worker is printed
again (``running``, at the time of the claim).
"""

import sys
from datetime import datetime
from typing import Final

import anyio
from anyio.abc import TaskStatus

from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId
from taskloom.engine.states import TaskState
from taskloom.engine.worker import Worker

WHEN: Final = "%Y-%m-%d %H:%M:%S UTC"


def _not_for_the_log(_task_id: TaskId, _state: TaskState) -> bool:
    """Another process's change is read only if the worker itself wants it."""
    return False


async def log_changes(
    manager: TaskManager,
    worker: Worker,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Print a line per change of state of the runs *worker* executes, until cancelled.

    A change is printed if the worker executes the task when the line is written, or
    is the change that made the run leave the worker (its end, or its wait for an
    answer, printed once the run has left)."""
    followed: dict[TaskId, TaskState] = {}
    """The runs followed: the state of each one's last line."""
    leaving: set[TaskId] = set()
    """Runs that left the worker while a change of theirs waited to be received."""
    with manager.subscribe(wants=_not_for_the_log) as changes:

        def left(task_id: TaskId) -> None:
            # Every change the run made here has been published: one not received yet is
            # its last line; with none, nothing more of it is printed.
            if changes.pending(task_id):
                leaving.add(task_id)
            else:
                followed.pop(task_id, None)

        with worker.leaving(left):
            task_status.started()
            async for task in changes:
                running_here = ours = worker.executes(task.id)
                if task.id in leaving:  # made while the worker executed it (or newer)
                    leaving.discard(task.id)
                    ours = True
                    if running_here:  # claimed here again since: a run followed anew
                        followed.pop(task.id, None)
                last = followed.get(task.id)
                if last is None and not ours:
                    continue
                if running_here and not task.is_terminal:
                    followed[task.id] = task.state
                else:
                    followed.pop(task.id, None)  # its last line: nothing more of it comes here
                if last is not task.state:
                    # A claim here: stamped now. A run claimed again (a lost lease, a
                    # drop) is stored unchanged, so its own time is its last change's.
                    claimed = last is None and running_here
                    when = manager.clock.now() if claimed else task.updated_at
                    print(_line(task, when), file=sys.stderr)  # noqa: T201


def _line(task: Task, when: datetime) -> str:
    why = ""
    if task.is_terminal and task.state is not TaskState.COMPLETED:
        why = f": {task.error.message if task.error else task.status_message}"
    return f"{when.strftime(WHEN)}  {task.name} {task.id} {task.state}{why}"
