"""One line on stderr each time a task this process runs changes state: the text log of
``taskloom worker`` and of a lingering worker (ADR 0040).

Only the runs of this process's worker are printed: its own changes (claims, ends, waits)
and those other processes make to them (a cancel, which the worker reads to stop the
nodes). Another process's tasks are neither printed nor read for the log: on PostgreSQL
every worker used to read every task change the database announced (ADR 0050 noted it).
"""

import sys
from collections import OrderedDict
from typing import Final

import anyio
from anyio.abc import TaskStatus

from taskloom.engine.manager import TaskManager
from taskloom.engine.models import TaskId
from taskloom.engine.states import TaskState
from taskloom.engine.worker import Worker

MOST_FOLLOWED: Final = 10_000
"""Runs remembered at once (their last state printed); a run that left this worker
without ending (waiting for an answer, taken by another worker) is forgotten first."""


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
    executed it at its previous line (so its end, or its wait for an answer, is printed
    after the run has left the worker)."""
    followed: OrderedDict[str, TaskState] = OrderedDict()
    with manager.subscribe(wants=_not_for_the_log) as changes:
        task_status.started()
        async for task in changes:
            last = followed.get(task.id)
            running_here = worker.executes(task.id)
            if last is None and not running_here:
                continue
            if task.is_terminal or not running_here:
                followed.pop(task.id, None)  # its last line: nothing more of it comes here
            else:
                followed[task.id] = task.state
                followed.move_to_end(task.id)
                if len(followed) > MOST_FOLLOWED:
                    followed.popitem(last=False)
            if last is task.state:
                continue
            why = ""
            if task.is_terminal and task.state is not TaskState.COMPLETED:
                why = f": {task.error.message if task.error else task.status_message}"
            when = task.updated_at.strftime("%Y-%m-%d %H:%M:%S UTC")
            print(f"{when}  {task.name} {task.id} {task.state}{why}", file=sys.stderr)  # noqa: T201
