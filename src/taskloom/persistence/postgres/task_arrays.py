"""Tasks written many at once: each task's new row and its history row as array columns.

The batched statements of progress writes (:mod:`.updates`), runs' final writes
(:mod:`.finishes`) and claims (:mod:`.takes`) bind, after columns of their own, the same
twelve per task (ADR 0055), and write them with the same two parts: the task row
(:func:`put_sql`) and its history row, a status-only row only under the cap
(:func:`history_sql`), as :func:`taskloom.persistence.sql.history.record` writes one row.
"""

from typing import Any, Final

from taskloom.engine.history import MAX_STATUS_ROWS
from taskloom.engine.models import Task
from taskloom.persistence.postgres.arrays import TypedArray, array_class
from taskloom.persistence.sql import history, rows
from taskloom.persistence.sql.dialect import POSTGRES

Columns = tuple[tuple[str, str], ...]
"""Array parameters: each one's name and PostgreSQL element type."""

TASK_COLUMNS: Final[Columns] = (
    ("state", "text"),
    ("version", "int"),
    ("updated_at", "timestamptz"),
    ("parked", "bool"),
    ("wake_at", "timestamptz"),
    ("body", "text"),
    ("h_version", "int"),
    ("h_at", "timestamptz"),
    ("h_state", "text"),
    ("h_message", "text"),
    ("h_cause", "text"),
    ("h_changed", "bool"),
)


class TaskArrays:
    """The array parameters of one batch: its own *leading* columns, then each task's."""

    def __init__(self, leading: Columns) -> None:
        self.columns: Final = (*leading, *TASK_COLUMNS)
        self._values: list[TypedArray] = [array_class(kind)() for _, kind in self.columns]

    def add(
        self, leading: tuple[object, ...], before: Task, after: Task, *, written: bool = True
    ) -> None:
        """One row: *leading*'s values, then *after*'s task row and the history row
        that writing it over *before* adds (``NULL``s unless *written*)."""
        task: Any = rows.update(POSTGRES, after).parameters if written else {}
        entry = history.insert(POSTGRES, before, after) if written else None
        h: Any = entry.parameters if entry is not None else {}
        row = (
            *leading,
            task.get("state"),
            task.get("version"),
            task.get("updated_at"),
            task.get("parked"),
            task.get("wake_at"),
            task.get("body"),
            h.get("version"),
            h.get("at"),
            h.get("state"),
            h.get("message"),
            h.get("cause"),
            before.state is not after.state,
        )
        for column, value in zip(self._values, row, strict=True):
            column.append(value)

    def parameters(self, **scalars: object) -> dict[str, object]:
        """Every column's array by name, with *scalars* and the history's ``cap``."""
        out: dict[str, object] = {"cap": MAX_STATUS_ROWS, **scalars}
        out.update(
            (name, values) for (name, _), values in zip(self.columns, self._values, strict=True)
        )
        return out


def unnest_sql(leading: Columns, *, ordinality: bool) -> str:
    """The common table ``i``: one row per task from the arrays of *leading* and the
    task's columns (with its position ``n`` when *ordinality*)."""
    columns = (*leading, *TASK_COLUMNS)
    arrays = ", ".join(f"%({name})b::{kind}[]" for name, kind in columns)
    names = ", ".join(name for name, _ in columns)
    if ordinality:
        return (
            f"i AS MATERIALIZED (SELECT * FROM unnest({arrays}) WITH ORDINALITY AS i({names}, n))"
        )
    return f"i AS MATERIALIZED (SELECT * FROM unnest({arrays}) AS i({names}))"


def put_sql(source: str, condition: str, *, returning: str = "") -> str:
    """The common table ``put``: the task rows of *source* (aliased ``x``) written over
    ``tasks t`` where *condition* holds."""
    return (
        "put AS (UPDATE tasks t SET state = x.state, version = x.version,"
        " updated_at = x.updated_at, parked = x.parked, wake_at = x.wake_at,"
        f" body = x.body::json FROM {source} WHERE {condition}{returning})"
    )


def history_sql(source: str) -> str:
    """The common table ``added``: the history rows of *source* (aliased ``x``), a
    status-only row only while the task has fewer than the cap (``%(cap)s``)."""
    return (
        "added AS (INSERT INTO task_history (task_id, version, at, state, status_message,"
        " cause, state_changed) SELECT x.task, x.h_version, x.h_at, x.h_state, x.h_message,"
        f" x.h_cause, x.h_changed FROM {source} WHERE x.h_version IS NOT NULL AND (x.h_changed"
        " OR (SELECT count(*) FROM task_history h WHERE h.task_id = x.task"
        " AND NOT h.state_changed) < %(cap)s))"
    )
