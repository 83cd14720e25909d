"""The runs of one claim taken with one statement, their checkpoints read with one more
(ADR 0055).

:func:`taskloom.persistence.sql.leases.take_each` writes, per run, the lease's
conditional upsert and then the task with its history row: two round trips a run. Here
every lease of the claim is upserted by one ``INSERT ... SELECT`` over arrays, in task
id order (bytewise: the order the renewals lock leases in), under the same condition
(the lease expired, or *reclaim_from*'s); the tasks whose lease was taken (``RETURNING``)
are written in the same statement with their history rows. Their checkpoints are read
by the next statement, once every lease is held: a former holder's node end either
committed before it (and is read) or is refused by the new token. A queued or parked
run that had no lease and no checkpoint when the claim ranked it has had no holder to
write one (a claim since would have changed the version the claim re-checks on the
locked row): when every run taken is such a fresh one, the read is not sent (ADR 0063).
"""

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Final

from taskloom.engine.models import TaskId
from taskloom.engine.runs import NodeRun
from taskloom.persistence.postgres.arrays import TextArray
from taskloom.persistence.postgres.task_arrays import (
    Columns,
    TaskArrays,
    history_sql,
    put_sql,
    unnest_sql,
)
from taskloom.persistence.sql import rows
from taskloom.persistence.sql.dialect import POSTGRES, Dialect
from taskloom.persistence.sql.leases import Taking
from taskloom.persistence.sql.script import Script, Statement

_LEADING: Final[Columns] = (
    ("task", "text"),
    ("worker", "text"),
    ("token", "text"),
    ("expires", "timestamptz"),
    ("changed", "bool"),
)


def take_all(
    d: Dialect,
    taking: list[Taking],
    now: datetime,
    reclaim_from: str | None,
    fresh: frozenset[TaskId] = frozenset(),
) -> Script[dict[TaskId, dict[str, NodeRun]]]:
    """:data:`taskloom.persistence.sql.leases.Takes` for PostgreSQL: two round trips
    whatever the number of runs, one when every run taken is *fresh* (it has no
    checkpoint to read)."""
    if not taking:
        return {}
    found = yield _statement(taking, now, reclaim_from)
    taken = [task_id for (task_id,) in found.rows]
    nodes: dict[TaskId, dict[str, NodeRun]] = {task_id: {} for task_id in taken}
    resumed = [task_id for task_id in taken if task_id not in fresh]
    if not resumed:
        return nodes
    checkpoints = yield Statement(_checkpoints_sql(), {"taken": TextArray(resumed)})
    for task_id, *row in checkpoints.rows:
        run = rows.node_run(POSTGRES, tuple(row))
        nodes[task_id][run.node] = run
    return nodes


def _statement(taking: Sequence[Taking], now: datetime, reclaim_from: str | None) -> Statement:
    arrays = TaskArrays(_LEADING)
    for task, started, lease in taking:
        changed = started is not task
        leading = (
            lease.task_id,
            lease.worker,
            lease.token,
            POSTGRES.time(lease.expires_at),
            changed,
        )
        arrays.add(leading, task, started, written=changed)
    parameters = arrays.parameters(now=POSTGRES.time(now), reclaim=reclaim_from)
    return Statement(_takes_sql(), parameters)


@cache
def _takes_sql() -> str:
    given = unnest_sql(_LEADING, ordinality=True)
    leased = (
        "l AS (INSERT INTO leases (task_id, worker, token, expires_at)"
        " SELECT task, worker, token, expires FROM i ORDER BY n"
        " ON CONFLICT (task_id) DO UPDATE SET worker = excluded.worker,"
        " token = excluded.token, expires_at = excluded.expires_at"
        " WHERE leases.expires_at <= %(now)s OR leases.worker = %(reclaim)s::text"
        " RETURNING task_id)"
    )
    put = put_sql("i x JOIN l ON l.task_id = x.task", "t.id = x.task AND x.changed")
    added = history_sql("i x JOIN l ON l.task_id = x.task")
    return f"WITH {given}, {leased}, {put}, {added} SELECT task_id FROM l"


@cache
def _checkpoints_sql() -> str:
    return (
        f"SELECT task_id, {rows.NODE_COLUMNS} FROM node_runs WHERE task_id = ANY(%(taken)b::text[])"
    )
