"""Tasks to rows and back. ``body`` is the task as JSON; other columns are indexed copies."""

from datetime import UTC, datetime, timedelta
from typing import Final

from pydantic import ValidationError

from taskloom.engine.errors import CorruptDatabaseError
from taskloom.engine.models import Task

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

INSERT_SQL: Final = (
    "INSERT INTO tasks"
    " (id, name, owner, state, version, updated_at, expires_at, idempotency_key, parent_id,"
    " created_us, workflow_version, body)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
UPDATE_SQL: Final = (
    "UPDATE tasks SET state = ?, version = ?, updated_at = ?, parked = ?, wake_at = ?, body = ?"
    " WHERE id = ?"
)
LIVE: Final = "(expires_at IS NULL OR expires_at > ?)"

InsertRow = tuple[
    str, str, str | None, str, int, int, int | None, str | None, str | None, int, str | None, str
]
UpdateRow = tuple[str, int, int, int, int | None, str, str]


def from_micros(value: int) -> datetime:
    """The UTC datetime for :func:`micros` output."""
    return _EPOCH + timedelta(microseconds=value)


def micros(moment: datetime) -> int:
    """Microseconds since the Unix epoch (exact, unlike float timestamps)."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def insert_row(task: Task) -> InsertRow:
    """Parameters of :data:`INSERT_SQL` for *task*."""
    expires_at = task.expires_at
    return (
        task.id,
        task.name,
        task.owner,
        task.state.value,
        task.version,
        micros(task.updated_at),
        micros(expires_at) if expires_at is not None else None,
        task.idempotency_key,
        task.parent_id,
        micros(task.created_at),
        task.workflow_version,
        task.model_dump_json(),
    )


def update_row(new: Task) -> UpdateRow:
    """Parameters of :data:`UPDATE_SQL`: write *new* over its row (which the writing
    transaction holds locked: see ADR 0032)."""
    return (
        new.state.value,
        new.version,
        micros(new.updated_at),
        int(new.parked),
        micros(new.wake_at) if new.wake_at is not None else None,
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
