"""The task history rows (ADR 0036), appended in the transaction of the task's write."""

from functools import cache

from taskloom.engine.history import MAX_STATUS_ROWS, entry_for
from taskloom.engine.models import Task
from taskloom.persistence.sql.dialect import Dialect
from taskloom.persistence.sql.script import Script, Statement

_COLUMNS = "version, at, state, status_message, cause, state_changed"


def record(d: Dialect, before: Task | None, after: Task) -> Script[None]:
    """Append the row of writing *after* over *before*: every state change, and status
    changes up to :data:`MAX_STATUS_ROWS` a task."""
    statement = insert(d, before, after)
    if statement is not None:
        yield statement


def insert(d: Dialect, before: Task | None, after: Task) -> Statement | None:
    """The statement of :func:`record`, or ``None`` when writing *after* adds no row."""
    entry = entry_for(before, after)
    if entry is None:
        return None
    return Statement(
        _insert_sql(d, entry.state_changed),
        {
            "task": entry.task_id,
            "version": entry.version,
            "at": d.time(entry.at),
            "state": entry.state.value,
            "message": entry.status_message,
            "cause": entry.cause.value,
            "cap": MAX_STATUS_ROWS,
        },
    )


@cache
def _insert_sql(d: Dialect, state_changed: bool) -> str:
    """The insert of a history row: a status change's only under the cap."""
    p = d.parameter
    sql = (
        f"INSERT INTO task_history ({d.history_key}, {_COLUMNS})"
        f" SELECT {d.history_task}, {p('version')}, {p('at')}, {p('state')}, {p('message')},"
        f" {p('cause')}, {'TRUE' if state_changed else 'FALSE'}"
    )
    if not state_changed:
        sql += (
            f" WHERE (SELECT count(*) FROM task_history WHERE {d.history_key} = {d.history_task}"
            f" AND NOT state_changed) < {p('cap')}"
        )
    return sql
