"""A create without an idempotency key as one statement (ADR 0061).

The task's row and its history row (the creation's: a state change, never under the
cap) go as one statement sent alone, which the server commits as it ends, durably:
one round trip where the transaction of :meth:`taskloom.persistence.sql.store.SqlStore._create`
takes four (BEGIN, the two inserts, COMMIT). The row is the shared codec's
(:func:`taskloom.persistence.sql.rows.insert_row`), the history row the shared rule's
(:func:`taskloom.engine.history.entry_for`). A create with an idempotency key keeps its
transaction: it may read and delete the key's holder.
"""

from typing import Final

from taskloom.engine.history import entry_for
from taskloom.engine.models import Task
from taskloom.persistence.postgres import rows
from taskloom.persistence.sql.dialect import POSTGRES
from taskloom.persistence.sql.script import Statement

CREATE_SQL: Final = (
    f"WITH created AS ({rows.INSERT_SQL}) INSERT INTO task_history"
    " (task_id, version, at, state, status_message, cause, state_changed)"
    " VALUES (%s, %s, %s, %s, %s, %s, TRUE)"
)


def create(task: Task) -> Statement:
    """The statement that stores *task* (without an idempotency key) with the history
    row of its creation."""
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
    return Statement(CREATE_SQL, (*rows.insert_row(task), *history))
