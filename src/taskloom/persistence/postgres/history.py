"""The task history table (ADR 0036): rows appended with the task write, read with it."""

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from taskloom.engine.history import MAX_STATUS_ROWS, Cause, HistoryEntry, entry_for
from taskloom.engine.models import Task, TaskId
from taskloom.engine.states import TaskState
from taskloom.persistence.postgres import rows
from taskloom.persistence.postgres.driver import Connection

_INSERT: Final = (
    "INSERT INTO task_history (task_id, version, at, state, status_message, cause, state_changed)"
    " VALUES (%s, %s, %s, %s, %s, %s, true)"
)
_INSERT_CAPPED: Final = (
    "INSERT INTO task_history (task_id, version, at, state, status_message, cause, state_changed)"
    " SELECT %s, %s, %s, %s, %s, %s, false WHERE (SELECT count(*) FROM task_history"
    " WHERE task_id = %s AND NOT state_changed) < %s"
)


async def record(connection: Connection, before: Task | None, after: Task) -> None:
    """Append the row of writing *after* over *before*, in the caller's transaction."""
    entry = entry_for(before, after)
    if entry is None:
        return
    values = (
        entry.task_id,
        entry.version,
        entry.at,
        entry.state.value,
        entry.status_message,
        entry.cause.value,
    )
    if entry.state_changed:
        await connection.execute(_INSERT, values)
    else:
        await connection.execute(_INSERT_CAPPED, (*values, entry.task_id, MAX_STATUS_ROWS))


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
