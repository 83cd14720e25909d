"""A create without an idempotency key as one statement (ADR 0061).

The task's row and its history row (the creation's: a state change, never under the
cap) go as one statement sent alone, which the server commits as it ends, durably:
one round trip where the transaction of :meth:`taskloom.persistence.sql.store.SqlStore._create`
takes four (BEGIN, the two inserts, COMMIT). The row is the shared codec's
(:func:`taskloom.persistence.sql.rows.insert_row`), the history row the shared rule's
(:func:`taskloom.engine.history.entry_for`). A create with an idempotency key keeps its
transaction: it may read and delete the key's holder.

A connection lost while the statement runs leaves its outcome unknown; the task's id is
fixed before it is sent, so the statement is sent again: it writes nothing if the id is
stored, and :func:`is_ours` tells the row then read apart from another task's.
"""

from typing import Final

from taskloom.engine.history import entry_for
from taskloom.engine.models import Task
from taskloom.persistence.postgres import rows
from taskloom.persistence.sql.dialect import POSTGRES
from taskloom.persistence.sql.script import Statement

CREATE_SQL: Final = (
    f"WITH created AS ({rows.INSERT_SQL} ON CONFLICT (id) DO NOTHING RETURNING id)"
    " INSERT INTO task_history"
    " (task_id, version, at, state, status_message, cause, state_changed)"
    " SELECT %s::text, %s::integer, %s::timestamptz, %s::text, %s::text, %s::text, TRUE"
    " FROM created RETURNING task_id"
)


def create(task: Task) -> Statement:
    """The statement that stores *task* (without an idempotency key) with the history
    row of its creation, unless its id is stored already (then it writes nothing): it
    returns a row if, and only if, it stored the task. Sent again after an unknown
    outcome, it stores the task at most once."""
    return Statement(CREATE_SQL, _parameters(task))


def is_ours(stored: Task, task: Task) -> bool:
    """Whether *stored*, found under *task*'s id, is *task* as created (it may have run
    since): its name, arguments, owner and creation time."""
    return (stored.name, stored.arguments, stored.owner, stored.created_at) == (
        task.name,
        task.arguments,
        task.owner,
        task.created_at,
    )


def _parameters(task: Task) -> tuple[object, ...]:
    """The task's row, then its creation's history row."""
    entry = entry_for(None, task)
    assert entry is not None  # a creation always adds its row
    history = (
        entry.task_id,
        entry.version,
        POSTGRES.time(entry.at),
        entry.state.value,
        entry.status_message,
        entry.cause.value,
    )
    return (*rows.insert_row(task), *history)
