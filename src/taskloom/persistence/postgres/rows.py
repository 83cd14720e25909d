"""Tasks to PostgreSQL rows (``timestamptz`` times): the shared codec of
:mod:`taskloom.persistence.sql.rows` in PostgreSQL's spelling."""

from datetime import UTC, datetime
from typing import Any, Final

from taskloom.engine.models import Task
from taskloom.persistence.sql import rows
from taskloom.persistence.sql.dialect import POSTGRES
from taskloom.persistence.sql.rows import task_from_body

__all__ = ["INSERT_SQL", "LIVE", "insert_row", "task_from_body", "utc"]

INSERT_SQL: Final = rows.insert_sql(POSTGRES)
LIVE: Final = "(expires_at IS NULL OR expires_at > %s)"
"""A condition that hides expired tasks (one positional parameter: now)."""


def insert_row(task: Task) -> tuple[Any, ...]:
    """Parameters of :data:`INSERT_SQL` for *task*."""
    return rows.insert_row(POSTGRES, task)


def utc(moment: datetime) -> datetime:
    """A timestamp read from the database, in UTC."""
    return moment.astimezone(UTC)
