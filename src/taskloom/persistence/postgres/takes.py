"""The runs of one claim taken with one statement, their checkpoints read with one more
(ADR 0055).

:func:`taskloom.persistence.sql.leases.take_each` writes, per run, the lease's
conditional upsert and then the task with its history row: two round trips a run. Here
every lease of the claim is upserted by one ``INSERT ... SELECT`` over arrays, in task
id order (bytewise: the order the renewals lock leases in), under the same condition
(the lease expired, or *reclaim_from*'s); the tasks whose lease was taken (``RETURNING``)
are written in the same statement with their history rows. Their checkpoints are read
by the next statement, once every lease is held: a former holder's node end either
committed before it (and is read) or is refused by the new token.
"""

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any, Final

from taskloom.engine.history import MAX_STATUS_ROWS
from taskloom.engine.models import TaskId
from taskloom.engine.runs import NodeRun
from taskloom.persistence.sql import history, rows
from taskloom.persistence.sql.dialect import POSTGRES, Dialect
from taskloom.persistence.sql.leases import Taking
from taskloom.persistence.sql.script import Script, Statement

_COLUMNS: Final = (
    ("task", "text"),
    ("worker", "text"),
    ("token", "text"),
    ("expires", "timestamptz"),
    ("changed", "bool"),
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


def take_all(
    d: Dialect, taking: list[Taking], now: datetime, reclaim_from: str | None
) -> Script[dict[TaskId, dict[str, NodeRun]]]:
    """:data:`taskloom.persistence.sql.leases.Takes` for PostgreSQL: two round trips
    whatever the number of runs."""
    if not taking:
        return {}
    found = yield _statement(taking, now, reclaim_from)
    taken = [task_id for (task_id,) in found.rows]
    if not taken:
        return {}
    checkpoints = yield Statement(_checkpoints_sql(), {"taken": taken})
    nodes: dict[TaskId, dict[str, NodeRun]] = {task_id: {} for task_id in taken}
    for task_id, *row in checkpoints.rows:
        run = rows.node_run(POSTGRES, tuple(row))
        nodes[task_id][run.node] = run
    return nodes


def _statement(taking: Sequence[Taking], now: datetime, reclaim_from: str | None) -> Statement:
    columns: list[list[object]] = [[] for _ in _COLUMNS]
    for task, started, lease in taking:
        after: Any = rows.update(POSTGRES, started).parameters if started is not task else {}
        entry = history.insert(POSTGRES, task, started) if started is not task else None
        h: Any = entry.parameters if entry is not None else {}
        row = (
            lease.task_id,
            lease.worker,
            lease.token,
            POSTGRES.time(lease.expires_at),
            started is not task,
            after.get("state"),
            after.get("version"),
            after.get("updated_at"),
            after.get("parked"),
            after.get("wake_at"),
            after.get("body"),
            h.get("version"),
            h.get("at"),
            h.get("state"),
            h.get("message"),
            h.get("cause"),
            task.state is not started.state,
        )
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    parameters: dict[str, object] = {
        "now": POSTGRES.time(now),
        "reclaim": reclaim_from,
        "cap": MAX_STATUS_ROWS,
    }
    parameters.update((name, column) for (name, _), column in zip(_COLUMNS, columns, strict=True))
    return Statement(_takes_sql(), parameters)


@cache
def _takes_sql() -> str:
    arrays = ", ".join(f"%({name})s::{kind}[]" for name, kind in _COLUMNS)
    names = ", ".join(name for name, _ in _COLUMNS)
    given = f"i AS MATERIALIZED (SELECT * FROM unnest({arrays}) WITH ORDINALITY AS i({names}, n))"
    leased = (
        "l AS (INSERT INTO leases (task_id, worker, token, expires_at)"
        " SELECT task, worker, token, expires FROM i ORDER BY n"
        " ON CONFLICT (task_id) DO UPDATE SET worker = excluded.worker,"
        " token = excluded.token, expires_at = excluded.expires_at"
        " WHERE leases.expires_at <= %(now)s OR leases.worker = %(reclaim)s::text"
        " RETURNING task_id)"
    )
    put = (
        "put AS (UPDATE tasks t SET state = x.state, version = x.version,"
        " updated_at = x.updated_at, parked = x.parked, wake_at = x.wake_at,"
        " body = x.body::json FROM i x JOIN l ON l.task_id = x.task"
        " WHERE t.id = x.task AND x.changed)"
    )
    added = (
        "added AS (INSERT INTO task_history (task_id, version, at, state, status_message,"
        " cause, state_changed) SELECT x.task, x.h_version, x.h_at, x.h_state, x.h_message,"
        " x.h_cause, x.h_changed FROM i x JOIN l ON l.task_id = x.task"
        " WHERE x.h_version IS NOT NULL AND (x.h_changed OR (SELECT count(*)"
        " FROM task_history h WHERE h.task_id = x.task AND NOT h.state_changed) < %(cap)s))"
    )
    return f"WITH {given}, {leased}, {put}, {added} SELECT task_id FROM l"


@cache
def _checkpoints_sql() -> str:
    return (
        f"SELECT task_id, {rows.NODE_COLUMNS} FROM node_runs WHERE task_id = ANY(%(taken)s::text[])"
    )
