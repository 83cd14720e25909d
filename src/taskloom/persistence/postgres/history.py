"""Reading the task history table (ADR 0036); rows are appended by
:func:`taskloom.persistence.sql.history.record`, with the task write."""

from collections.abc import Sequence
from datetime import datetime

from taskloom.engine.history import Cause, HistoryEntry
from taskloom.engine.models import Task, TaskId
from taskloom.engine.states import TaskState
from taskloom.persistence.postgres import rows
from taskloom.persistence.postgres.driver import Connection


async def read(
    task_id: TaskId, now: datetime, connection: Connection
) -> tuple[Task, Sequence[HistoryEntry]] | None:
    """The live task and its rows, oldest first, in one statement (so one snapshot)."""
    cursor = await connection.execute(
        "SELECT t.body, h.version, h.at, h.state, h.status_message, h.cause, h.state_changed"
        " FROM tasks t LEFT JOIN task_history h ON h.task_id = t.id"
        f" WHERE t.id = %s AND {rows.LIVE.replace('expires_at', 't.expires_at')}"
        " ORDER BY h.version",
        (task_id, now),
    )
    found = await cursor.fetchall()
    if not found:
        return None
    task = rows.task_from_body(found[0][0])
    entries = tuple(
        HistoryEntry(
            task_id=task.id,
            version=version,
            at=rows.utc(at),
            state=TaskState(state),
            status_message=message,
            cause=Cause(cause),
            state_changed=changed,
        )
        for _, version, at, state, message, cause, changed in found
        if version is not None
    )
    return task, entries
