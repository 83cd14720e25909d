"""Run transactions only the PostgreSQL store has: claims that skip locked rows and
lease renewal in lock order. The rest are the shared scripts of
:mod:`taskloom.persistence.sql.runs`.

Each function runs inside one transaction of the connection it is given. Writers lock a
task row (``FOR NO KEY UPDATE``, which leaves the foreign-key checks of checkpoint inserts
alone) before its lease row. The one cycle left, purging an expired task while its worker
writes a checkpoint, is broken by PostgreSQL's deadlock detector and the loser retried.
"""

import secrets
from datetime import timedelta

from taskloom.engine.claims import ClaimRule
from taskloom.engine.models import Task, TaskId, TaskMutation, ensure_successor
from taskloom.engine.runs import ClaimedRun, Instant, Lease, at
from taskloom.engine.states import TaskState
from taskloom.persistence.claims import claimable
from taskloom.persistence.postgres.driver import Connection
from taskloom.persistence.sql import runs, tasks
from taskloom.persistence.sql.dialect import POSTGRES
from taskloom.persistence.sql.rows import task_from_body
from taskloom.persistence.sql.script import run_async

_NO_CAP = 2**62


async def claim_runs(
    connection: Connection,
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
    """See :meth:`taskloom.engine.runs.RunStore.claim_runs`.

    Fair across owners: an owner's turn is the leases it holds of *worker* plus the
    candidate's rank among its own (oldest first); the chosen rows are then locked.

    Candidates are locked with ``FOR NO KEY UPDATE SKIP LOCKED`` (workers never queue behind
    each other); the lease is then taken by a conditional upsert, the verdict that
    settles a race with a claim that read an older snapshot.
    """
    rule = ClaimRule.of(workflows, reclaim_from)
    if rule.is_empty or limit < 1:
        return []
    now = at(now)  # in this transaction attempt: a retried claim never commits a stale lease
    condition, parameters = claimable(rule, POSTGRES)
    cursor = await connection.execute(
        "WITH held AS ("
        "  SELECT coalesce(t.owner, '') AS who, count(*) AS n FROM leases l"
        "  JOIN tasks t ON t.id = l.task_id"
        "  WHERE l.worker = %(worker)s AND l.expires_at > %(now)s GROUP BY 1),"
        " ready AS ("
        "  SELECT t.id, t.position, coalesce(t.owner, '') AS who,"
        "   row_number() OVER (PARTITION BY coalesce(t.owner, '') ORDER BY t.position) AS rank"
        f"  FROM tasks t LEFT JOIN leases l ON l.task_id = t.id WHERE {condition}),"
        " chosen AS ("
        "  SELECT r.id FROM ready r LEFT JOIN held h ON h.who = r.who"
        "  WHERE (r.who = '' OR coalesce(h.n, 0) + r.rank <= %(cap)s)"
        "  ORDER BY coalesce(h.n, 0) + r.rank, r.position LIMIT %(limit)s)"
        " SELECT t.body, l.task_id IS NOT NULL FROM tasks t"
        " LEFT JOIN leases l ON l.task_id = t.id"
        " WHERE t.id IN (SELECT id FROM chosen)"
        " FOR NO KEY UPDATE OF t SKIP LOCKED",
        {
            **parameters,
            "now": now,
            "limit": limit,
            "worker": worker,
            "cap": per_owner if per_owner is not None else _NO_CAP,
        },
    )
    candidates = [(task_from_body(body), had_lease) for body, had_lease in await cursor.fetchall()]
    claimed: list[ClaimedRun] = []
    expires = now + lease_for
    # Leases are taken in task id order, as renew_leases locks them (no deadlock);
    # Python's order of these ASCII ids is PostgreSQL's ``COLLATE "C"``.
    for task, had_lease in sorted(candidates, key=lambda candidate: candidate[0].id):
        lease = Lease(
            task_id=task.id, worker=worker, token=secrets.token_hex(16), expires_at=expires
        )
        taken = await connection.execute(
            "INSERT INTO leases (task_id, worker, token, expires_at)"
            " VALUES (%(task)s, %(worker)s, %(token)s, %(expires)s)"
            " ON CONFLICT (task_id) DO UPDATE SET worker = excluded.worker,"
            " token = excluded.token, expires_at = excluded.expires_at"
            " WHERE leases.expires_at <= %(now)s OR leases.worker = %(reclaim)s",
            {
                "task": task.id,
                "worker": worker,
                "token": lease.token,
                "expires": expires,
                "now": now,
                "reclaim": reclaim_from,
            },
        )
        if taken.rowcount != 1:
            continue  # another worker took it since our snapshot
        nodes = await run_async(runs.node_runs(POSTGRES, task.id), connection.execute)
        started = task
        if task.state is TaskState.QUEUED or task.parked:
            started = start(task)
            ensure_successor(task, started)
            await run_async(tasks.put(POSTGRES, task, started), connection.execute)
        resumed = bool(had_lease) or bool(nodes) or task.state is not TaskState.QUEUED
        claimed.append(ClaimedRun(task=started, lease=lease, nodes=nodes, resumed=resumed))
    oldest_first = {task.id: index for index, (task, _) in enumerate(candidates)}
    return sorted(claimed, key=lambda run: oldest_first[run.task.id])


async def renew_leases(
    connection: Connection, *, worker: str, now: Instant, lease_for: timedelta
) -> dict[TaskId, Task | None]:
    """See :meth:`taskloom.engine.runs.RunStore.renew_leases`.

    The rows are locked in ``task_id`` order (bytewise, ``COLLATE "C"``, as Python sorts
    the ASCII ids) before the update, the order in which :func:`claim_runs` takes
    leases: a bare multi-row ``UPDATE`` locks in the heap's order, which deadlocked with
    a claim taking over some of the same (expired) leases.
    """
    cursor = await connection.execute(
        "WITH held AS ("
        "  SELECT task_id FROM leases WHERE worker = %(worker)s"
        '  ORDER BY task_id COLLATE "C" FOR NO KEY UPDATE),'
        " renewed AS ("
        "  UPDATE leases l SET expires_at = %(expires)s FROM held"
        "  WHERE l.task_id = held.task_id AND l.worker = %(worker)s RETURNING l.task_id)"
        " SELECT r.task_id, t.body FROM renewed r LEFT JOIN tasks t ON t.id = r.task_id",
        {"expires": at(now) + lease_for, "worker": worker},
    )
    return {
        TaskId(task_id): task_from_body(body) if body is not None else None
        for task_id, body in await cursor.fetchall()
    }
