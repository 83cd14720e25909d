"""Engine tasks in the 2025-11-25 wire shape (plain dicts, so ``"ttl": null`` survives).

The SDK dumps pydantic results with ``exclude_none``, which would drop the ``ttl`` the
schema requires when retention is unlimited; dicts reach the wire as they are.
"""

from datetime import datetime
from typing import Any

from taskloom.engine.models import Task
from taskloom.server.status import wire_status


def timestamp(moment: datetime) -> str:
    """ISO-8601 in UTC with microseconds and a ``Z`` suffix (one width, so the strings
    sort as the times do)."""
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def legacy_task(task: Task) -> dict[str, Any]:
    """The flat Task object of ``tasks/get``, ``tasks/cancel`` and status notifications."""
    wire: dict[str, Any] = {
        "taskId": task.id,
        "status": wire_status(task.state),
        "createdAt": timestamp(task.created_at),
        "lastUpdatedAt": timestamp(task.updated_at),
        "ttl": task.ttl_ms,
    }
    if task.status_message is not None:
        wire["statusMessage"] = task.status_message
    if task.poll_interval_ms is not None:
        wire["pollInterval"] = task.poll_interval_ms
    return wire


def create_task_result(task: Task) -> dict[str, Any]:
    """The ``CreateTaskResult`` of a task-augmented ``tools/call``: the task, nested."""
    return {"task": legacy_task(task)}


def task_page(tasks: tuple[Task, ...], next_cursor: str | None) -> dict[str, Any]:
    """The ``tasks/list`` result: a page of tasks and, when more remain, ``nextCursor``."""
    page: dict[str, Any] = {"tasks": [legacy_task(task) for task in tasks]}
    if next_cursor is not None:
        page["nextCursor"] = next_cursor
    return page
