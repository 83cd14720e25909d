"""Reading the task history table (ADR 0036); rows are appended by
:func:`taskloom.persistence.sql.history.record`, with the task write."""

import sqlite3
from collections.abc import Sequence

from taskloom.engine.history import Cause, HistoryEntry
from taskloom.engine.models import TaskId
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import rows


def read(raw: sqlite3.Connection, task_id: TaskId) -> Sequence[HistoryEntry]:
    """The task's rows, oldest first (the caller holds the read transaction)."""
    found = raw.execute(
        "SELECT version, at, state, status_message, cause, state_changed FROM task_history"
        " WHERE task_seq = (SELECT seq FROM tasks WHERE id = ?) ORDER BY version",
        (task_id,),
    ).fetchall()
    return tuple(
        HistoryEntry(
            task_id=task_id,
            version=version,
            at=rows.from_micros(at),
            state=TaskState(state),
            status_message=message,
            cause=Cause(cause),
            state_changed=bool(changed),
        )
        for version, at, state, message, cause, changed in found
    )
