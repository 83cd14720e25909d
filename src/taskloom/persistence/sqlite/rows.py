"""Tasks to SQLite rows (times in microseconds since the epoch): the shared codec of
:mod:`taskloom.persistence.sql.rows` in SQLite's spelling."""

from typing import Final, cast

from taskloom.engine.models import Task
from taskloom.persistence.sql import rows
from taskloom.persistence.sql.dialect import SQLITE, from_micros, micros
from taskloom.persistence.sql.rows import task_from_body

__all__ = [
    "INSERT_SQL",
    "LIVE",
    "InsertRow",
    "from_micros",
    "insert_row",
    "micros",
    "task_from_body",
]

INSERT_SQL: Final = rows.insert_sql(SQLITE)
LIVE: Final = "(expires_at IS NULL OR expires_at > ?)"
"""A condition that hides expired tasks (one positional parameter: now)."""

InsertRow = tuple[
    str, str, str | None, str, int, int, int | None, str | None, str | None, int, str | None, str
]


def insert_row(task: Task) -> InsertRow:
    """Parameters of :data:`INSERT_SQL` for *task*."""
    return cast(InsertRow, rows.insert_row(SQLITE, task))
