"""The task history table (ADR 0036): rows appended with the task write, read with it."""

import sqlite3
from collections.abc import Sequence
from typing import Final

from taskloom.engine.history import MAX_STATUS_ROWS, Cause, HistoryEntry, entry_for
from taskloom.engine.models import Task, TaskId
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import rows

_COLUMNS: Final = "task_seq, version, at, state, status_message, cause, state_changed"
_INSERT: Final = (
    f"INSERT INTO task_history ({_COLUMNS}) SELECT seq, ?, ?, ?, ?, ?, 1 FROM tasks WHERE id = ?"
)
_INSERT_CAPPED: Final = (
    f"INSERT INTO task_history ({_COLUMNS}) SELECT seq, ?, ?, ?, ?, ?, 0 FROM tasks t"
    " WHERE id = ? AND (SELECT count(*) FROM task_history"
    " WHERE task_seq = t.seq AND state_changed = 0) < ?"
)


def record(raw: sqlite3.Connection, before: Task | None, after: Task) -> None:
    """Append the row of writing *after* over *before*, in the caller's transaction."""
    entry = entry_for(before, after)
    if entry is None:
        return
    values = (
        entry.version,
        rows.micros(entry.at),
        entry.state.value,
        entry.status_message,
        entry.cause.value,
        entry.task_id,
    )
    if entry.state_changed:
        raw.execute(_INSERT, values)
    else:
        raw.execute(_INSERT_CAPPED, (*values, MAX_STATUS_ROWS))


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
