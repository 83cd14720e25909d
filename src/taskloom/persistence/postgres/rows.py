"""Tasks to rows and back. ``body`` is the task as JSON; other columns are indexed copies."""

from datetime import UTC, datetime
from typing import Any, Final

from pydantic import ValidationError

from taskloom.engine.errors import CorruptDatabaseError
from taskloom.engine.models import Task

INSERT_SQL: Final = (
    "INSERT INTO tasks"
    " (id, name, owner, state, version, updated_at, expires_at, idempotency_key, parent_id,"
    " created_at, workflow_version, body)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
UPDATE_SQL: Final = (
    "UPDATE tasks SET state = %s, version = %s, updated_at = %s, parked = %s, wake_at = %s,"
    " body = %s"
    " WHERE id = %s"
)
LIVE: Final = "(expires_at IS NULL OR expires_at > %s)"
"""A condition that hides expired tasks (one parameter: now)."""


def insert_row(task: Task) -> tuple[Any, ...]:
    """Parameters of :data:`INSERT_SQL` for *task*."""
    return (
        task.id,
        task.name,
        task.owner,
        task.state.value,
        task.version,
        task.updated_at,
        task.expires_at,
        task.idempotency_key,
        task.parent_id,
        task.created_at,
        task.workflow_version,
        task.model_dump_json(),
    )


def update_row(new: Task) -> tuple[Any, ...]:
    """Parameters of :data:`UPDATE_SQL`: write *new* over its row (which the writing
    transaction holds locked: see ADR 0032)."""
    return (
        new.state.value,
        new.version,
        new.updated_at,
        new.parked,
        new.wake_at,
        new.model_dump_json(),
        new.id,
    )


def task_from_body(body: str) -> Task:
    """The task stored in a ``body`` column.

    Raises:
        CorruptDatabaseError: the stored JSON is not a valid task.
    """
    try:
        return Task.model_validate_json(body)
    except ValidationError as error:
        raise CorruptDatabaseError(
            f"a stored task is unreadable: {error.errors()[0]['msg']}"
        ) from error


def utc(moment: datetime) -> datetime:
    """A timestamp read from the database, in UTC."""
    return moment.astimezone(UTC)
