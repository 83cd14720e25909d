"""One line on stderr each time a task this process runs changes state: the text log of
``taskloom worker`` and of a lingering worker (ADR 0040)."""

import sys

import anyio
from anyio.abc import TaskStatus

from taskloom.engine.manager import TaskManager
from taskloom.engine.states import TaskState


async def log_changes(
    manager: TaskManager, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Print a line per change of state of the tasks *manager* sees, until cancelled."""
    states: dict[str, TaskState] = {}
    with manager.subscribe() as changes:
        task_status.started()
        async for task in changes:
            if states.get(task.id) is task.state:
                continue
            states[task.id] = task.state
            why = ""
            if task.is_terminal:
                del states[task.id]
                if task.state is not TaskState.COMPLETED:
                    why = f": {task.error.message if task.error else task.status_message}"
            when = task.updated_at.strftime("%Y-%m-%d %H:%M:%S UTC")
            print(f"{when}  {task.name} {task.id} {task.state}{why}", file=sys.stderr)  # noqa: T201
