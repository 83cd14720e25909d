"""Run transactions only the SQLite store has: claims and lease renewal (one writer
holds the database, so no row locks). The rest are the shared scripts of
:mod:`taskloom.persistence.sql.runs`.

Each function runs in the writer's thread inside one transaction.
"""

import secrets
import sqlite3
from datetime import timedelta

from taskloom.engine.claims import ClaimRule
from taskloom.engine.models import Task, TaskId, TaskMutation, ensure_successor
from taskloom.engine.runs import ClaimedRun, Instant, Lease, at
from taskloom.engine.states import TaskState
from taskloom.persistence.claims import claimable
from taskloom.persistence.sql import runs, tasks
from taskloom.persistence.sql.dialect import SQLITE, micros
from taskloom.persistence.sql.rows import task_from_body
from taskloom.persistence.sql.script import run_sync

_NO_CAP = 2**62


def claim_runs(
    raw: sqlite3.Connection,
    *,
    worker: str,
    workflows: frozenset[str | tuple[str, str]],
    now: Instant,
    lease_for: timedelta,
    limit: int,
    start: TaskMutation,
    reclaim_from: str | None,
    per_owner: int | None = None,
) -> list[ClaimedRun]:
    """See :meth:`taskloom.engine.runs.RunStore.claim_runs` (fair: an owner's turn is
    its held leases plus its candidate's rank among its own, oldest first)."""
    rule = ClaimRule.of(workflows, reclaim_from)
    if rule.is_empty or limit < 1:
        return []
    now = at(now)  # in the writer's transaction: the time this claim commits at
    condition, parameters = claimable(rule, SQLITE)
    candidates = raw.execute(
        "WITH held AS ("
        "  SELECT coalesce(t.owner, '') AS who, count(*) AS n FROM leases l"
        "  JOIN tasks t ON t.id = l.task_id WHERE l.worker = :worker AND l.expires_at > :now"
        "  GROUP BY who),"
        " ready AS ("
        "  SELECT t.id, t.body, l.task_id IS NOT NULL AS had, t.seq, coalesce(t.owner, '') AS who,"
        "   row_number() OVER (PARTITION BY coalesce(t.owner, '') ORDER BY t.seq) AS rank"
        f"  FROM tasks t LEFT JOIN leases l ON l.task_id = t.id WHERE {condition})"
        " SELECT r.id, r.body, r.had FROM ready r LEFT JOIN held h ON h.who = r.who"
        " WHERE (r.who = '' OR coalesce(h.n, 0) + r.rank <= :cap)"
        " ORDER BY coalesce(h.n, 0) + r.rank, r.seq LIMIT :limit",
        {
            **parameters,
            "worker": worker,
            "now": micros(now),
            "cap": per_owner if per_owner is not None else _NO_CAP,
            "limit": limit,
        },
    ).fetchall()
    claimed: list[ClaimedRun] = []
    expires = now + lease_for
    for task_id, body, had_lease in candidates:
        task = task_from_body(body)
        nodes = run_sync(runs.node_runs(SQLITE, task.id), raw.execute)
        if task.state is TaskState.QUEUED or task.parked:
            started = start(task)
            ensure_successor(task, started)
            run_sync(tasks.put(SQLITE, task, started), raw.execute)
        else:
            started = task
        lease = Lease(
            task_id=task.id, worker=worker, token=secrets.token_hex(16), expires_at=expires
        )
        raw.execute(
            "INSERT INTO leases (task_id, worker, token, expires_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (task_id) DO UPDATE SET"
            " worker = excluded.worker, token = excluded.token, expires_at = excluded.expires_at",
            (task_id, worker, lease.token, micros(expires)),
        )
        resumed = bool(had_lease) or bool(nodes) or task.state is not TaskState.QUEUED
        claimed.append(ClaimedRun(task=started, lease=lease, nodes=nodes, resumed=resumed))
    return claimed


def renew_leases(
    raw: sqlite3.Connection, *, worker: str, now: Instant, lease_for: timedelta
) -> dict[TaskId, Task | None]:
    """See :meth:`taskloom.engine.runs.RunStore.renew_leases`."""
    raw.execute(
        "UPDATE leases SET expires_at = ? WHERE worker = ?",
        (micros(at(now) + lease_for), worker),
    )
    found = raw.execute(
        "SELECT l.task_id, t.body FROM leases l LEFT JOIN tasks t ON t.id = l.task_id"
        " WHERE l.worker = ?",
        (worker,),
    ).fetchall()
    return {
        TaskId(task_id): task_from_body(body) if body is not None else None
        for task_id, body in found
    }
